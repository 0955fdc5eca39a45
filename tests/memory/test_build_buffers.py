"""`plan --measure` counts the weight copies the build at hand makes (read from one short load
of the model by the plan's own binary, `exedra_engine._shell.extra_buffers`)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from exedra_engine import LaunchPlan
from exedra_engine._shell.extra_buffers import weight_buffers
from tests.conftest import Run


def test_plan_measure_adds_the_builds_own_weight_copies_and_says_where_they_came_from(
    run: Run,
    llama_server: str,
    real_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    argv = ["plan", "--model", str(real_model), "--kind", "llama", "--no-config", "--ctx", "4096"]
    argv += ["--executor", llama_server, "--no-port-check"]
    plain = msgspec.json.decode(run(*argv, "--json").out, type=LaunchPlan)
    r = run(*argv, "--json", "--measure")
    assert r.code == 0, r.err
    measured = msgspec.json.decode(r.out, type=LaunchPlan)
    assert plain.memory is not None and measured.memory is not None
    wb = weight_buffers(llama_server, str(real_model), measured.args, measured.env)  # cached
    added = measured.memory.host.parts.weights - plain.memory.host.parts.weights
    assert added == wb.extra_bytes
    explained = run(*argv, "--measure", "--explain")
    assert f"own load of {real_model.name}" in explained.out
