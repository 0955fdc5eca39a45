"""Tests are named for what they check, never for the issue that asked for them: no test file
and no test function is named ``test_i20_...``, ``test_i18_item9_...`` or ``test_review_...``
(a docstring may cite the issue). Nor is a test file named for when its tests were written
(``test_known_defects.py``, ``test_regressions.py``, ``test_round3.py``, ``test_2026_12.py``):
each test goes to the module of its subject."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BY_ISSUE = re.compile(r"test_(i\d+|review)(_|$)")
# a file named for when: found defects, regressions, a review round or turn, a date
BY_WHEN = re.compile(
    r"test_(.+_)?(known_defects|defects|regressions?|(round|turn)_?\d+|(19|20)\d\d)(_|$)"
)


def named_by_issue(path: Path) -> list[str]:
    """The test file itself, if named by an issue or by when, and each test function of it
    that is named by an issue."""
    found = [path.name] if BY_ISSUE.match(path.stem) or BY_WHEN.match(path.stem) else []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and BY_ISSUE.match(node.name):
            found.append(f"{path.name}:{node.lineno} {node.name}")
    return found


def test_no_test_is_named_by_its_issue() -> None:
    files = sorted([*ROOT.glob("tests/**/test_*.py"), *ROOT.glob("properties/**/test_*.py")])
    assert len(files) > 50
    assert [f for path in files for f in named_by_issue(path)] == []


def test_an_issue_name_is_found(tmp_path: Path) -> None:
    path = tmp_path / "test_i20_item3.py"
    path.write_text(
        "def test_review_x(): ...\ndef test_iterates(): ...\nasync def test_i7(): ...\n"
    )
    assert named_by_issue(path) == [
        "test_i20_item3.py",
        "test_i20_item3.py:1 test_review_x",
        "test_i20_item3.py:3 test_i7",
    ]


def test_a_file_named_by_when_is_found(tmp_path: Path) -> None:
    names = ("test_known_defects", "test_regressions", "test_cli_round3", "test_2026_12_03")
    for name in names:
        path = tmp_path / f"{name}.py"
        path.write_text("")
        assert named_by_issue(path) == [path.name]
    for name in ("test_defect_free_parse", "test_exit_statuses", "test_20_stop_start_cycles"):
        path = tmp_path / f"{name}.py"
        path.write_text("")
        assert named_by_issue(path) == []
