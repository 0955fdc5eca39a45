"""probe(): fixture trees of real driver layouts, and the pure interpretation."""

from __future__ import annotations

import os

import pytest

from exedra_engine import GPU, Kind, probe
from exedra_engine._core.host.hardware import (
    DrmNode,
    HostSnapshot,
    NvidiaProcGpu,
    available_bytes,
    backends_of,
    cpu_threads,
    hardware_from,
    ram_bytes,
)
from tests.conftest import Run, host

GiB = 1 << 30


@pytest.mark.parametrize(
    ("tree", "gpus"),
    [
        (
            "amdgpu",
            [
                GPU(
                    card="card0",
                    driver="amdgpu",
                    vram=17163091968,
                    vram_free=17163091968 - 123456,
                )
            ],
        ),
        ("intel-integrated", [GPU(card="card0", driver="i915", vram=0)]),
        ("intel-xe", [GPU(card="card1", driver="xe", vram=12 * GiB)]),
        ("intel-arc-dkms", [GPU(card="card0", driver="i915", vram=16 * GiB)]),
        ("nvidia", [GPU(card="card0", driver="nvidia", vram=0)]),
        ("nvidia-no-drm", [GPU(card="nvidia0", driver="nvidia", vram=0)]),
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
    assert hw.cpu.available == 30000000 * 1024


H200_INFO = "Model: \t\t NVIDIA H200\nBus Location: \t 0000:00:06.0\nDevice Minor: \t 3\n"


def test_nvidia_cards_without_drm_nodes_come_from_the_drivers_own_list() -> None:
    # Seen on an H200 VM: no /sys/class/drm, the card only in /proc/driver/nvidia/gpus.
    listed = (NvidiaProcGpu(bus="0000:00:06.0", information=H200_INFO),)
    snap = HostSnapshot(affinity_cpus=16, nvidia=listed)
    assert hardware_from(snap).gpus == (GPU(card="nvidia3", driver="nvidia", vram=0),)
    # an unreadable information file: the card is still there, named by its address
    bare = HostSnapshot(affinity_cpus=16, nvidia=(NvidiaProcGpu(bus="0000:00:06.0"),))
    assert hardware_from(bare).gpus == (GPU(card="0000:00:06.0", driver="nvidia", vram=0),)


def test_an_nvidia_drm_node_is_not_counted_twice_with_the_drivers_list() -> None:
    node = DrmNode(render="renderD128", device_drm=("card0",), driver_link="../nvidia")
    other = DrmNode(render="renderD129", device_drm=("card1",), driver_link="../i915")
    listed = (NvidiaProcGpu(bus="0000:01:00.0", information=H200_INFO),)
    both = HostSnapshot(affinity_cpus=8, drm=(node,), nvidia=listed)
    assert [g.card for g in hardware_from(both).gpus] == ["card0"]
    # an Intel iGPU's node beside a node-less NVIDIA card: both, DRM's first
    mixed = HostSnapshot(affinity_cpus=8, drm=(other,), nvidia=listed)
    assert [(g.card, g.driver) for g in hardware_from(mixed).gpus] == [
        ("card1", "i915"),
        ("nvidia3", "nvidia"),
    ]


def test_cgroup_limits_cap_threads_and_ram() -> None:
    hw = probe(host("cgroup-limited", affinity=8)).unwrap()
    assert hw.cpu.threads == 2  # 150000/100000 rounds up
    assert hw.cpu.ram == 8 * GiB


def test_cgroup_bounds_available_memory() -> None:
    # 8 GiB limit, 3 GiB charged of which 1 GiB is inactive page cache: 6 GiB still usable,
    # although the host's MemAvailable says ~28.6 GiB.
    hw = probe(host("cgroup-limited", affinity=8)).unwrap()
    assert hw.cpu.available == 6 * GiB


def test_free_vram_only_where_the_driver_says() -> None:
    by_tree = {t: probe(host(t)).unwrap().gpus for t in ("amdgpu", "nvidia", "intel-xe")}
    assert [g.vram_free for g in by_tree["amdgpu"]] == [17163091968 - 123456]
    # nvidia and intel expose no used-memory file: unknown, never the total
    assert [g.vram_free for g in by_tree["nvidia"]] == [None]
    assert [g.vram_free for g in by_tree["intel-xe"]] == [None]
    # an amdgpu card whose driver has no mem_info_vram_used (an old kernel): unknown
    assert {g.vram_free for g in probe(host("four-gpus")).unwrap().gpus} == {None}


def test_available_memory_is_total() -> None:
    meminfo = "MemTotal: 4096 kB\nMemAvailable: 2048 kB\n"
    assert available_bytes(None, None) is None
    assert available_bytes("MemTotal: 4096 kB\n", None) is None
    assert available_bytes(meminfo, None) == 2048 * 1024
    assert available_bytes(meminfo, "max", "100") == 2048 * 1024
    assert available_bytes(meminfo, "1048576", None) == 2048 * 1024  # usage unknown
    assert available_bytes(meminfo, "1048576", "1048576") == 0
    assert available_bytes(meminfo, "1048576", "2000000") == 0  # over the limit: none left
    assert available_bytes(None, "1048576", "524288") == 524288
    assert available_bytes(meminfo, "1048576", "524288", "inactive_file 262144\n") == 786432
    assert available_bytes(meminfo, "1048576", "524288", "inactive_file 999999999\n") == 1048576
    assert available_bytes(meminfo, "1048576", "garbage", "inactive_file 1\n") == 2048 * 1024


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
                amdgpu_vram_used="12\n",
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


@pytest.mark.parametrize(
    ("tree", "gpu_free"),
    [("amdgpu", "16.0 GiB free"), ("nvidia", "unknown free"), ("intel-xe", "unknown free")],
)
def test_probe_text_says_free_or_unknown(
    tree: str, gpu_free: str, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    hw = probe(host(tree)).unwrap()
    monkeypatch.setattr("exedra_engine.cli.probe.host_hardware", lambda **_: hw)
    r = run("probe")
    assert r.code == 0
    cpu, gpu = r.out.splitlines()[:2]
    assert cpu.endswith("31.2 GiB RAM, 28.6 GiB free"), cpu
    assert gpu.endswith(gpu_free), gpu
