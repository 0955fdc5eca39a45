"""The code stays readable (issue 20, item 6): every function in ``_core/emit/``, and in the
whole package, at radon cyclomatic complexity 15 or less. Not ruff's C90 gate again: ruff's
mccabe does not count boolean operators, radon does (``a and b or c`` adds two)."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit  # a test dependency: its absence is a failure

import exedra_engine._core.emit as emit_pkg

LIMIT = 15
EMIT = Path(emit_pkg.__file__).resolve().parent
PACKAGE = EMIT.parent.parent


def _over(paths: list[Path], root: Path) -> list[str]:
    over = []
    for path in paths:
        for block in cc_visit(path.read_text()):
            if block.complexity > LIMIT:
                where = path.relative_to(root)
                over.append(f"{where}:{block.lineno} {block.name} = {block.complexity}")
    return over


def test_every_emit_function_is_at_radon_cc_15_or_less() -> None:
    paths = sorted(p for p in EMIT.rglob("*.py") if "__pycache__" not in p.parts)
    assert _over(paths, EMIT) == []


def test_every_function_of_the_package_is_at_radon_cc_15_or_less() -> None:
    paths = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
    assert len(paths) > 80  # the whole package, not an empty glob
    assert _over(paths, PACKAGE) == []
