"""The installed executors run on CPUs this machine is not: emulated by qemu-user.

On a machine with AVX-512 nothing else proves that users without it are served. Each binary
must load a tiny model and answer one request under
  - Nehalem-v2: x86-64-v2 (SSE4.2, no AVX), the oldest CPU the project serves;
  - Haswell-v4: AVX2 + FMA, no AVX-512 (most AMD Zen 2/3, Intel consumer parts).
A native AVX-512 build dies with SIGILL under Haswell-v4; a GGML_NATIVE=OFF build (which still
assumes AVX2) dies under Nehalem-v2. The ggml CPU-variant build loads sse42 and haswell plugins.
Emulation is 10-50x slower, hence the timeouts.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [pytest.mark.executor, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
CPUS = {"Nehalem-v2": "sse42", "Haswell-v4": "haswell"}


def _prover() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "prove_executor", ROOT / "scripts/prove_executor.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["prove_executor"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def qemu() -> str:
    if platform.machine() != "x86_64":
        pytest.skip("the emulated CPU models are x86-64 ones")
    found = shutil.which("qemu-x86_64")
    if not found:
        msg = "qemu-x86_64 is missing: ./dev test installs Debian's qemu-user (apt-get)"
        if os.environ.get("CI"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return found


@pytest.mark.parametrize("cpu", sorted(CPUS))
@pytest.mark.parametrize("kind", ["llama", "whisper"])
def test_executor_answers_on_an_emulated_cpu(
    kind: str, cpu: str, qemu: str, llama_server: str, whisper_server: str
) -> None:
    binary = llama_server if kind == "llama" else whisper_server
    proof = _prover().prove(kind, binary, wrap=[qemu, "-cpu", cpu], timeout=300)
    assert proof.ok, f"{Path(binary).name} under -cpu {cpu}: {proof.why}\n{proof.log[-2000:]}"
    # The plugin ggml chose is the widest this CPU model has (not a lucky x64 fallback).
    assert proof.variant == CPUS[cpu], proof.line()


def test_a_cpu_below_x86_64_v2_gets_the_baseline_plugin(qemu: str, llama_server: str) -> None:
    """A CPU model older than every plugin built (no SSE4.2) must not be reported as served by
    the sse42 plugin: the proof names what ggml actually loaded (x64, the baseline)."""
    proof = _prover().prove("llama", llama_server, wrap=[qemu, "-cpu", "core2duo"], timeout=300)
    assert proof.ok, proof.why
    assert proof.variant == "x64", proof.line()
