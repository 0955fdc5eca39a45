"""Printing the rows side by side with their references and goals, and writing them as JSON."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from bench.common import ROOT, Row
from bench.goals import GOALS


def print_rows(rows: list[Row]) -> None:
    w = max(len(r.what) for r in rows)
    print(
        f"{'#':<2} {'benchmark':<{w}}  {'ours':<28} {'reference':<44} {'figure':<30} "
        f"{'goal':<26} met"
    )
    for r in rows:
        print(
            f"{r.n:<2} {r.what:<{w}}  {r.ours:<28} {r.ref:<44} {r.figure:<30} {r.goal:<26} "
            f"{'OK' if r.met else 'NO'}"
        )


def print_goals() -> None:
    """The goal table itself: what each row promises, against what."""
    w = max(len(k) for k in GOALS)
    print(f"{'#':<2} {'goal':<{w}}  {'target':<46} reference")
    for key, g in sorted(GOALS.items(), key=lambda kg: kg[1].row):
        print(f"{g.row:<2} {key:<{w}}  {g.text:<46} {g.reference}")


def default_json_path() -> Path:
    """.cache/bench/<commit>.json, to compare commits."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    path = ROOT / ".cache" / "bench" / f"{commit or 'unknown'}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def write_json(rows: list[Row], path: Path) -> None:
    path.write_text(
        json.dumps(
            [
                {
                    "row": r.n,
                    "what": r.what,
                    "figure": r.figure,
                    "goal": r.goal,
                    "met": r.met,
                    **r.data,
                }
                for r in rows
            ],
            indent=2,
        )
        + "\n"
    )
