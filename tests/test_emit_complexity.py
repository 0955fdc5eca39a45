"""Emit's code stays readable (issue 20, item 6): every function in ``_core/emit/`` at radon
cyclomatic complexity 15 or less (ruff's mccabe gate does not count boolean operators, radon
does), and each target's checks beside its writer."""

from __future__ import annotations

import importlib
from pathlib import Path

from radon.complexity import cc_visit  # a test dependency: its absence is a failure

import exedra_engine._core.emit as emit_pkg

LIMIT = 15
EMIT = Path(emit_pkg.__file__).resolve().parent


def test_i20_item6_every_emit_function_is_at_radon_cc_15_or_less() -> None:
    over = []
    for path in sorted(EMIT.glob("*.py")):
        for block in cc_visit(path.read_text()):
            if block.complexity > LIMIT:
                over.append(f"{path.name}:{block.lineno} {block.name} = {block.complexity}")
    assert over == [], over


def test_i20_item6_each_target_checks_beside_its_writer() -> None:
    for target in ("k8s", "systemd", "quadlet"):
        module = importlib.import_module(f"exedra_engine._core.emit.{target}")
        assert callable(getattr(module, f"emit_{target}"))
        assert callable(getattr(module, f"check_{target}"))
