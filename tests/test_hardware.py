"""probe(): fixture trees of real driver layouts, and the pure interpretation."""

from __future__ import annotations

import os

import pytest

from exedra_engine import GPU, Kind, probe
from exedra_engine._core.hardware import (
    DrmNode,
    HostSnapshot,
    backends_of,
    cpu_threads,
    hardware_from,
    ram_bytes,
)
from tests.conftest import host

GiB = 1 << 30


@pytest.mark.parametrize(
    ("tree", "gpus"),
    [
        ("amdgpu", [GPU(card="card0", driver="amdgpu", vram=17163091968)]),
        ("intel-integrated", [GPU(card="card0", driver="i915", vram=0)]),
        ("intel-xe", [GPU(card="card1", driver="xe", vram=12 * GiB)]),
        ("intel-arc-dkms", [GPU(card="card0", driver="i915", vram=16 * GiB)]),
        ("nvidia", [GPU(card="card0", driver="nvidia", vram=0)]),
        (
            "laptop-two-gpus",
            [GPU(card="card0", driver="i915", vram=0), GPU(card="card1", driver="nvidia", vram=0)],
        ),
        ("four-gpus", [GPU(card=f"card{i}", driver="amdgpu", vram=68702699520) for i in range(4)]),
        ("none", []),
    ],
)
def test_gpus_of_each_fixture_tree(tree: str, gpus: list[GPU]) -> None:
    hw = probe(host(tree)).unwrap()
    assert list(hw.gpus) == gpus
    assert hw.has_gpu() == bool(gpus)
    assert hw.cpu.threads == 8 and hw.cpu.ram == 32768000 * 1024


def test_cgroup_limits_cap_threads_and_ram() -> None:
    hw = probe(host("cgroup-limited", affinity=8)).unwrap()
    assert hw.cpu.threads == 2  # 150000/100000 rounds up
    assert hw.cpu.ram == 8 * GiB


def test_executors_and_their_backend_plugins() -> None:
    hw = probe(host("nvidia")).unwrap()
    llama = hw.executor(Kind.LLAMA)
    assert llama is not None
    assert llama.path == "/usr/bin/llama-server"  # the PATH entry, not the link target
    assert llama.backends == ("cpu", "cuda")
    assert llama.has_gpu_backend()
    assert hw.executor(Kind.TRANSCRIBE) is None
    two = probe(host("laptop-two-gpus")).unwrap()
    assert [e.kind for e in two.executors] == [Kind.LLAMA, Kind.TRANSCRIBE]
    assert two.executors[1].backends == ("cpu", "vulkan")


def test_path_order_decides_which_executor() -> None:
    hw = probe(host("laptop-two-gpus", path="/nowhere:/usr/bin:/usr/local/bin")).unwrap()
    assert [e.path for e in hw.executors] == [
        "/usr/local/bin/llama-server",
        "/usr/local/bin/whisper-server",
    ]
    assert probe(host("laptop-two-gpus", path="/usr/bin")).unwrap().executors == ()


def test_backend_names() -> None:
    libs = (
        "libggml.so",
        "libggml-base.so.0.9.4",
        "libggml-cpu-haswell.so",
        "libggml-cuda.so.0",
        "libggml-hip.so",
        "libggml-vulkan.so.0.20.0",
        "libllama.so",
        "libggml-blas.so",
        "README",
    )
    assert backends_of(libs) == ("blas", "cpu", "cuda", "hip", "vulkan")
    assert backends_of(()) == ()


def test_cpu_and_ram_parsing_is_total() -> None:
    assert cpu_threads(0, None) == 1
    assert cpu_threads(16, "max 100000") == 16
    assert cpu_threads(16, "50000 100000") == 1
    assert cpu_threads(16, "garbage") == 16
    assert cpu_threads(16, "x 100000") == 16
    assert ram_bytes(None, None) == 0
    assert ram_bytes("MemTotal: 1024 kB\n", "max") == 1 << 20
    assert ram_bytes("nonsense", "4096") == 4096
    assert ram_bytes("MemTotal:   2048 kB", "1024") == 1024


def test_garbled_sysfs_values_read_as_unknown() -> None:
    snap = HostSnapshot(
        affinity_cpus=2,
        drm=(
            DrmNode(
                render="renderD129",
                driver_link="../../bus/pci/drivers/amdgpu",
                amdgpu_vram_total="lots\n",
                device_drm=("card1", "renderD129"),
            ),
            DrmNode(render="renderD128"),
        ),
    )
    hw = hardware_from(snap)
    assert hw.gpus == (
        GPU(card="renderD128", driver="", vram=0),
        GPU(card="card1", driver="amdgpu", vram=0),
    )


def test_probe_on_this_host_never_touches_the_environment() -> None:
    before = dict(os.environ)
    hw = probe().unwrap()
    assert dict(os.environ) == before
    assert hw.cpu.threads >= 1
    assert hw.cpu.ram > 0
