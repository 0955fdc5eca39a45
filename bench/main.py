"""The command line of the bench: which rows, how many repetitions, where the JSON goes."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import bench
from bench.common import Row
from bench.report import default_json_path, print_goals, print_rows, write_json
from bench.rows import ROWS


def _row_numbers(text: str) -> set[int]:
    try:
        wanted = {int(x) for x in text.split(",")}
    except ValueError:
        raise argparse.ArgumentTypeError(f"not row numbers: {text!r}") from None
    if unknown := wanted - set(ROWS):
        raise argparse.ArgumentTypeError(f"no such row: {sorted(unknown)} (rows: 1..{len(ROWS)})")
    return wanted


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench", description=(bench.__doc__ or "").split("\n\n")[0])
    ap.add_argument(
        "--json",
        metavar="FILE",
        nargs="?",
        const="",
        help="also write the rows as JSON (default: .cache/bench/<commit>.json)",
    )
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument(
        "--only", "--row", type=_row_numbers, metavar="N[,N...]", help="comma-separated row numbers"
    )
    ap.add_argument("--goals", action="store_true", help="print the goal table and exit")
    a = ap.parse_args(argv)
    if a.goals:
        print_goals()
        return 0
    only: set[int] = a.only or set(ROWS)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as d:
        for n, run in ROWS.items():
            if n in only:
                rows.extend(run(Path(d), a.quick))
    print_rows(rows)
    if a.json is not None:
        path = Path(a.json) if a.json else default_json_path()
        print(f"\nwrote {path}")
        write_json(rows, path)
    return 0
