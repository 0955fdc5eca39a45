"""Benchmarks, each measured side by side with its reference in this one run.

    python bench/run.py [--json [FILE]] [--quick] [--only N[,N...]] [--goals]
    python -m bench ...            (the same, from the repository root)

--json alone writes .cache/bench/<commit>.json, to compare commits.

These machines are shared and noisy: every figure is a median (or a percentile) of
several runs, reported as a ratio to a reference measured in the same process run, and
compared with its goal in bench/goals.py (issue #6's, tightened by #11 and #20). Nothing
here is a pass/fail test; the closing column says whether the goal was met on this run.
Commands timed in a subprocess (rows 6 and 9) run this tree's package with bytecode cached.

Layout: bench/rows/<row>.py measures one row (its number `N`, `run(tmp, quick)`);
bench/goals.py holds every goal beside its reference; bench/common.py the Row value and
what rows share (the model writers and executor lookups come from exedra_engine.testing,
as the tests have them); bench/report.py prints and writes the rows; bench/main.py parses
the command line.
"""

import sys
from pathlib import Path

# This tree's package, whatever the venv installed.
_SRC = str(Path(__file__).resolve().parent.parent / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)
