"""The planner places by the devices the executor itself lists (``--list-devices``, recorded
in `ExecutorInfo.devices`) where it was asked, and by the kernel's GPUs otherwise: a Vulkan
device with no DRM node offloads; a card the executor does not see does not; NVIDIA memory
is known; a group's device shares are real."""

from __future__ import annotations

import msgspec
import pytest
from returns.result import Failure, Result

from exedra_engine import (
    CPU,
    GPU,
    Constraints,
    Device,
    DoesNotFit,
    EngineError,
    ExecutorInfo,
    GroupMember,
    GroupPlan,
    Hardware,
    Kind,
    MemberFacts,
    ModelSpec,
    plan_group,
    plan_launch,
)
from exedra_engine._core.host.device_views import disagreements
from exedra_engine._core.host.hardware_file import hardware_from_json
from exedra_engine._core.memory.settings import MIB
from tests.memory.test_memory_planner import info
from tests.memory_models import gpu_host, llama_135m

SPEC = ModelSpec(id="m", path="/models/m.gguf", kind=Kind.LLAMA)
LAVAPIPE = Device(
    name="Vulkan0",
    description="llvmpipe (LLVM 15.0.6, 256 bits)",
    total=2048 * MIB,
    free=2048 * MIB,
)


def _host(
    devices: tuple[Device, ...],
    *,
    gpus: tuple[GPU, ...] = (),
    listed: bool = True,
    backends: tuple[str, ...] = ("cpu", "vulkan"),
) -> Hardware:
    exe = ExecutorInfo(
        kind=Kind.LLAMA,
        path="/bin/llama-server",
        backends=backends,
        devices=devices,
        devices_listed=listed,
    )
    return Hardware(
        cpu=CPU(threads=8, ram=16 << 30, available=12 << 30), gpus=gpus, executors=(exe,)
    )


def _offloads(args: tuple[str, ...]) -> bool:
    return not any(args[i : i + 2] == ("--n-gpu-layers", "0") for i in range(len(args)))


def test_a_vulkan_device_with_no_drm_node_offloads() -> None:
    hw = _host((LAVAPIPE,))
    assert not hw.has_gpu()  # the kernel's view: no DRM render node
    inv = llama_135m()
    p = plan_launch(SPEC, hw, Constraints(ctx=4096), model=info(inv), inventory=inv).unwrap()
    assert _offloads(p.args), p.args
    assert p.memory is not None
    (dev,) = p.memory.devices
    assert dev.name == "Vulkan0"
    assert dev.available == 2048 * MIB
    assert dev.reserved > 0  # the model's layers and KV are on it


def test_an_executor_that_lists_no_device_runs_on_the_cpu_whatever_sysfs_shows() -> None:
    amd = GPU(card="card0", driver="amdgpu", vram=8 << 30, vram_free=8 << 30)
    hw = _host((), gpus=(amd,))
    assert hw.has_gpu()
    inv = llama_135m()
    p = plan_launch(SPEC, hw, Constraints(ctx=4096), model=info(inv), inventory=inv).unwrap()
    assert not _offloads(p.args), p.args
    assert p.memory is not None and p.memory.devices == ()


def test_an_executor_never_asked_falls_back_to_the_kernels_gpus() -> None:
    inv = llama_135m()
    hw = gpu_host(4 << 30)
    assert hw.executors[0].listed() is False
    p = plan_launch(SPEC, hw, Constraints(ctx=4096), model=info(inv), inventory=inv).unwrap()
    assert _offloads(p.args)
    assert p.memory is not None and p.memory.devices[0].name == "Vulkan0"
    assert p.memory.devices[0].available == 4 << 30
    # And with no GPU backend and no list: the CPU, as before.
    cpu = _host((), gpus=hw.gpus, listed=False, backends=("cpu",))
    q = plan_launch(SPEC, cpu, Constraints(ctx=4096), model=info(inv), inventory=inv).unwrap()
    assert not _offloads(q.args)


def test_nvidia_memory_unknown_in_sysfs_is_known_from_the_executor() -> None:
    card = GPU(card="nvidia0", driver="nvidia", vram=0)
    h100 = Device(name="CUDA0", description="NVIDIA H100 80GB HBM3", total=80 << 30, free=79 << 30)
    hw = _host((h100,), gpus=(card,), backends=("cpu", "cuda"))
    inv = llama_135m()
    p = plan_launch(SPEC, hw, Constraints(ctx=4096), model=info(inv), inventory=inv).unwrap()
    assert p.memory is not None and p.memory.devices[0].name == "CUDA0"
    assert p.memory.devices[0].available == 79 << 30
    (said,) = disagreements(hw, Kind.LLAMA, "llama-server")
    assert "nvidia0 (nvidia): VRAM unknown in sysfs" in said and "CUDA0 with 81920 MiB" in said


def test_a_device_too_small_is_judged_by_the_executors_own_figure() -> None:
    tiny = Device(name="Vulkan0", description="small", total=64 * MIB, free=40 * MIB)
    inv = llama_135m()
    got = plan_launch(
        SPEC,
        _host((tiny,)),
        Constraints(ctx=4096, extra_args=("-ngl", "99")),
        model=info(inv),
        inventory=inv,
    )
    assert isinstance(got, Failure)
    assert isinstance(got.failure(), DoesNotFit)
    assert "Vulkan0's free memory" in str(got.failure()) and "40 MiB free" in str(got.failure())


def test_an_accelerator_takes_no_layers() -> None:
    blas = Device(name="BLAS", description="OpenBLAS", total=0, free=0)
    inv = llama_135m()
    p = plan_launch(
        SPEC, _host((blas,)), Constraints(ctx=4096), model=info(inv), inventory=inv
    ).unwrap()
    assert not _offloads(p.args)


def test_the_views_disagree_where_the_kernel_shows_no_gpu() -> None:
    said = disagreements(_host((LAVAPIPE,)), Kind.LLAMA, "llama-server")
    assert any("Vulkan0 (llvmpipe" in s and "has no GPU in sysfs" in s for s in said)
    assert any("software renderer" in s for s in said)
    amd = GPU(card="card0", driver="amdgpu", vram=8 << 30)
    (hidden,) = disagreements(_host((), gpus=(amd,)), Kind.LLAMA, "llama-server")
    assert "card0 (amdgpu), but llama-server lists no device" in hidden
    assert disagreements(gpu_host(1 << 30), Kind.LLAMA, "llama-server") == ()  # not asked


def _group(hw: Hardware) -> Result[GroupPlan, EngineError]:
    # -ngl 99: llama.cpp's fitter is off, so a device share that cannot fit is refused.
    inv = llama_135m()
    members = [
        GroupMember(
            spec=ModelSpec(id=i, path=f"/models/{i}.gguf", kind=Kind.LLAMA, run_args=("-ngl", "99"))
        )
        for i in ("a", "b")
    ]
    facts = [MemberFacts(model=info(inv), inventory=inv) for _ in members]
    return plan_group(members, hw, Constraints(ctx=4096), facts=facts)


def test_a_group_shares_the_executors_device_and_is_refused_when_it_cannot_fit() -> None:
    roomy = _host((LAVAPIPE,))
    g = _group(roomy).unwrap()
    assert g.device_budgets == (2048 * MIB,)
    reserved = [p.memory.devices[0].reserved for p in g.plans if p.memory is not None]
    assert all(r > 0 for r in reserved)
    assert all(s.device_memory[0] >= r for s, r in zip(g.shares, reserved, strict=True))
    assert sum(s.device_memory[0] for s in g.shares) <= 2048 * MIB
    # Room for one member's reservation, not for two: refused, naming the device.
    one = reserved[0]
    small = Device(name="Vulkan0", description="small", total=2 * one, free=one + one // 2)
    got = _group(_host((small,)))
    assert isinstance(got, Failure)
    assert isinstance(got.failure(), DoesNotFit)
    assert "of GPU 0 (Vulkan0)" in str(got.failure())


@pytest.mark.parametrize("field", ["devices", "devices_listed"])
def test_a_hardware_file_round_trips_the_devices(field: str) -> None:
    hw = _host((LAVAPIPE,))
    back = hardware_from_json(msgspec.json.encode(hw), "host.json")
    assert back == hw
    assert getattr(back.executors[0], field) == getattr(hw.executors[0], field)
