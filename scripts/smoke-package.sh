#!/usr/bin/env bash
# Build the sdist and the wheel, install each into a fresh venv and smoke-test it:
# --version, a dry-run plan, and a wheel built with a packager's config path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
out=$root/.cache/package
rm -rf "$out"
mkdir -p "$out"
"$py" -m build --outdir "$out/dist" "$root" >"$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }
sdist=$(ls "$out"/dist/*.tar.gz)
wheel=$(ls "$out"/dist/*.whl)
"$py" -c 'import sys, zipfile; assert "exedra_engine/py.typed" in zipfile.ZipFile(sys.argv[1]).namelist(), "py.typed missing"' "$wheel"

smoke() {  # smoke NAME ARTIFACT EXPECTED_CONFIG_PATH
  local venv=$out/venv-$1
  "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "$2" >"$out/pip-$1.log" 2>&1 \
    || { cat "$out/pip-$1.log"; exit 1; }
  "$venv/bin/exedra-engine" --version
  "$venv/bin/exedra-engine" plan --model /nonexistent/model.gguf --kind llama --id smoke \
    --executor /usr/bin/llama-server --no-config --no-port-check --port 18080 --json >"$out/plan-$1.json"
  "$venv/bin/python" - "$out/plan-$1.json" "$3" <<'PY'
import json, sys
import exedra_engine
plan = json.load(open(sys.argv[1]))
assert plan["port"] == 18080 and plan["command"] == "/usr/bin/llama-server", plan
assert exedra_engine.DEFAULT_CONFIG_PATH == sys.argv[2], exedra_engine.DEFAULT_CONFIG_PATH
assert not {"trio", "numpy", "gguf"} & set(sys.modules)
PY
  echo "smoke: $1 ok"
}
smoke wheel "$wheel" /etc/exedra/engine.d
smoke sdist "$sdist" /etc/exedra/engine.d
EXEDRA_ENGINE_CONFIG_PATH=/usr/local/etc/exedra/engine.d "$py" -m build --wheel \
  --outdir "$out/dist-sysconf" "$root" >"$out/build-sysconf.log" 2>&1 || { cat "$out/build-sysconf.log"; exit 1; }
smoke sysconf "$(ls "$out"/dist-sysconf/*.whl)" /usr/local/etc/exedra/engine.d
