#!/usr/bin/env bash
# The suite in two phases (`just test`, `just test-quick`):
#   1. the tests that start no process, bind no port and time nothing, on every core (pytest-xdist;
#      EXEDRA_TEST_WORKERS sets how many, default: one per core);
#   2. the tests marked `serial` (conftest.py says which and why), one at a time.
# Both phases run even when the first fails; the exit status is the first failure's.
# usage: test-phases.sh MARKEXPR [PYTEST ARGS...]   MARKEXPR: "" or e.g. "not slow"
set -uo pipefail
extra=$1; shift
and() { if [ -n "$extra" ]; then printf '(%s) and %s' "$extra" "$1"; else printf '%s' "$1"; fi; }
workers=${EXEDRA_TEST_WORKERS:-$(nproc)}
rc1=0 rc2=0
echo "test phase 1 of 2: parallel ($workers workers): $(and "not serial")" >&2
python -m pytest -q -p xdist -n "$workers" -m "$(and "not serial")" "$@" || rc1=$?
echo "test phase 2 of 2: serial: $(and serial)" >&2
python -m pytest -q -m "$(and serial)" "$@" || rc2=$?
# 5: no test collected in that phase (a run limited to one file, say): not a failure.
[ "$rc1" = 5 ] && rc1=0
[ "$rc2" = 5 ] && rc2=0
[ "$rc1" != 0 ] && exit "$rc1"
exit "$rc2"
