"""Tests are named for what they check, never for the issue that asked for them: no test file
and no test function is named ``test_i20_...``, ``test_i18_item9_...`` or ``test_review_...``
(a docstring may cite the issue)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BY_ISSUE = re.compile(r"test_(i\d+|review)(_|$)")


def named_by_issue(path: Path) -> list[str]:
    """The test file itself and each test function of it that is named by an issue."""
    found = [path.name] if BY_ISSUE.match(path.stem) else []
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
