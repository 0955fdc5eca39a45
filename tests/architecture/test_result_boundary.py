"""A Result at the public boundary only: inside the library errors are raised, a public
function converts once (`as_result`), and nothing takes a Result apart again; the command line
never sees one. The files are read and their ASTs walked; nothing is imported."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "exedra_engine"


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(SRC.rglob("*.py"))]


def _name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def test_the_library_matches_no_result() -> None:
    # Under returns, `case Success(v)` types `v` as Any: mypy stops seeing exactly where two
    # layers meet (no mypy setting flags it; --disallow-any-expr is silent). Inside the
    # library errors are raised; a Result is made once, at the public boundary, and never
    # taken apart again.
    found = [
        f"{p.relative_to(SRC)}:{n.lineno}"
        for p, tree in _modules()
        for n in ast.walk(tree)
        if isinstance(n, ast.MatchClass) and _name(n.cls) in ("Success", "Failure")
    ]
    assert found == []


def test_no_assertion_stands_in_for_an_exhaustive_match() -> None:
    found = [
        f"{p.relative_to(SRC)}:{n.lineno}"
        for p, tree in _modules()
        for n in ast.walk(tree)
        if isinstance(n, ast.Raise)
        and isinstance(n.exc, ast.Call)
        and _name(n.exc.func) == "AssertionError"
    ]
    assert found == []


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of `fn`'s body, not those of a function defined inside it."""
    for child in ast.iter_child_nodes(fn):
        if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield child
            yield from _own_nodes(child)


def test_as_result_is_only_a_public_boundary() -> None:
    # `as_result` converts once: it is what a public function returns (or the function
    # `boundary` makes of a raising one), nothing else.
    bad = []
    for p, tree in _modules():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for n in _own_nodes(fn):
                if isinstance(n, ast.Call) and _name(n.func) == "as_result":
                    returned = any(
                        isinstance(r, ast.Return) and r.value is not None and n in ast.walk(r.value)
                        for r in fn.body
                    )
                    if fn.name.startswith("_") or not returned:
                        bad.append(f"{p.relative_to(SRC)}:{n.lineno} in {fn.name}")
    assert bad == []


def test_the_command_line_never_sees_a_result() -> None:
    bad = [
        f"{p.relative_to(SRC)}:{n.lineno}"
        for p, tree in _modules()
        if p.relative_to(SRC).parts[0] == "cli"  # cli/ and each command's package in it
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("returns")
    ]
    assert bad == []
