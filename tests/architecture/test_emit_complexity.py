"""The code stays readable (issue 20, item 6): every function in ``_core/emit/``, and in the
whole package, at radon cyclomatic complexity 15 or less (ruff's mccabe gate does not count
boolean operators, radon does), and each target has its writer and its checks."""

from __future__ import annotations

import importlib
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


def test_each_target_has_its_writer_and_its_checks() -> None:
    # Kubernetes' checks are a module of their own (k8s_check); the units' sit beside their writer.
    for target, checks in (("k8s", "k8s_check"), ("systemd", "systemd"), ("quadlet", "quadlet")):
        writer = importlib.import_module(f"exedra_engine._core.emit.formats.{target}")
        checker = importlib.import_module(f"exedra_engine._core.emit.formats.{checks}")
        assert callable(getattr(writer, f"emit_{target}"))
        assert callable(getattr(checker, f"check_{target}"))
