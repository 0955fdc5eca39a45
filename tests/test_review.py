"""Defects found by trying the merged main as a new user would (review of 2026-12-03)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exedra_engine.cli import build_parser
from tests.conftest import FAKE, Run

PLAN = ["--kind", "llama", "--no-config", "--executor", str(FAKE)]


def test_review_drain_zero_accepted() -> None:
    # launch --help says "default 0: stop at once", but --drain 0 was refused as not positive.
    a = build_parser().parse_args(
        ["launch", "--model", "/m.gguf", "--kind", "llama", "--drain", "0"]
    )
    assert a.drain == 0.0
    a = build_parser().parse_args(
        ["launch", "--model", "/m.gguf", "--kind", "llama", "--drain", "2.5"]
    )
    assert a.drain == 2.5


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "x"])
def test_review_drain_bad_values_refused(value: str, tiny_llama: Path, run: Run) -> None:
    r = run("launch", "--model", str(tiny_llama), *PLAN, f"--drain={value}")
    assert r.code == 2, r.err
    assert r.err.count("\n") == 1 and "argument --drain:" in r.err, r.err
