"""Plans to emit in the tests: one per fixture host (a GPU vendor each, and a CPU-only one)."""

from __future__ import annotations

from exedra_engine import (
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    LaunchPlan,
    ModelInfo,
    ModelSpec,
    plan_launch,
)
from exedra_engine._shell.probe import probe
from tests.conftest import host

VENDOR_HOSTS = ("nvidia", "amdgpu", "intel-xe", "intel-arc-dkms", "none")
MODEL = "/var/lib/exedra/models/qwen/model.gguf"
KEY = "k3y-that-must-not-appear"


def hardware(tree: str) -> Hardware:
    hw = probe(host(tree)).unwrap()
    if hw.executor(Kind.LLAMA) is None:
        exe = ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server", backends=("cpu",))
        hw = Hardware(cpu=hw.cpu, gpus=hw.gpus, executors=(exe,))
    return hw


def plan_for(tree: str, *, key: str = KEY, host_: str = "0.0.0.0", **c: object) -> LaunchPlan:
    spec = ModelSpec(id="qwen", path=MODEL, kind=Kind.LLAMA)
    model = ModelInfo(path=MODEL, size=4_683_073_184, architecture="qwen2", quant="Q4_K_M")
    constraints = Constraints(host=host_, port=8080, api_key=key, **c)  # type: ignore[arg-type]
    return plan_launch(spec, hardware(tree), constraints, model=model).unwrap()
