"""The plan from the executor's own devices, on lavapipe (Vulkan0, 2048 MiB): what the
executor lists, the plan that offloads because of it, and the plan's reservation against the
executor's own breakdown. These await the executor-devices change (`exedra_engine.Device`,
`ExecutorInfo.devices`, the bounded ``--list-devices`` probe, the planner placing by them)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exedra_engine import Constraints, Kind, ModelSpec, plan
from exedra_engine._shell.probe import probe
from tests.conftest import VULKAN_ENV

MiB = 1 << 20


@pytest.fixture
def vulkan_on_path(vulkan_llama_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """This host as probe sees it with the Vulkan build first on PATH and lavapipe visible."""
    monkeypatch.setenv("PATH", f"{Path(vulkan_llama_server).parent}:{os.environ['PATH']}")
    monkeypatch.delenv("EXEDRA_EXECUTORS_BIN", raising=False)
    for k, v in VULKAN_ENV.items():
        monkeypatch.setenv(k, v)
    return vulkan_llama_server


def test_probe_lists_vulkan0_as_the_executor_sees_it(vulkan_on_path: str) -> None:
    hw = probe().unwrap()
    exe = hw.executor(Kind.LLAMA)
    assert exe is not None and os.path.samefile(exe.path, vulkan_on_path)
    (dev,) = exe.devices
    assert dev.name == "Vulkan0" and "llvmpipe" in dev.description
    assert dev.total == 2048 * MiB and dev.free == 2048 * MiB


def test_a_plan_from_the_probe_offloads_to_vulkan0(vulkan_on_path: str, real_model: Path) -> None:
    hw = probe().unwrap()
    p = plan(ModelSpec(path=str(real_model), kind=Kind.LLAMA), hw, Constraints(ctx=8192)).unwrap()
    assert "--n-gpu-layers" not in p.args  # no "-ngl 0": the executor has a usable device
    assert p.memory is not None and [d.name for d in p.memory.devices] == ["Vulkan0"]
