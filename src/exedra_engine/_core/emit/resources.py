"""What a plan asks of the host: its GPUs (by the hardware file's drivers, or an option), its
threads, and the rights a hardened unit denies by default. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from exedra_engine._core.emit.options import EmitOptions, Origin
from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.struct import Value, freeze
from exedra_engine._core.values import Hardware
from exedra_engine.errors import EmitError


class Gpu(Value, frozen=True, kw_only=True):
    driver: str
    backend: str
    count: int
    resource: str
    """The Kubernetes extended resource ("" when none is known for the driver)."""


# The extended resource a device plugin advertises for each kernel driver (NVIDIA's and AMD's
# plugins, Intel's GPU plugin: one resource per driver). Other drivers have none known.
GPU_RESOURCES = freeze(
    {
        "nvidia": "nvidia.com/gpu",
        "amdgpu": "amd.com/gpu",
        "i915": "gpu.intel.com/i915",
        "xe": "gpu.intel.com/xe",
    }
)
# The drivers each GGML GPU backend drives, most specific backend first; vulkan drives any.
BACKEND_DRIVERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cuda", ("nvidia",)),
    ("hip", ("amdgpu",)),
    ("sycl", ("xe", "i915")),
    ("musa", ("mtgpu",)),
    ("vulkan", ("nvidia", "amdgpu", "xe", "i915")),
)


def needs_of(
    p: ExecutorProfile, items: Sequence[Item], env: Sequence[tuple[str, str]]
) -> tuple[tuple[str, str], ...]:
    found: dict[str, str] = {}
    for it in items:
        need = p.resource_flags.get(it.key or "")
        if need is None or it.negated:
            continue
        if need == "priority" and not _raises_priority(it.values):
            continue
        found.setdefault(need, it.tokens[0])
    for name, value in env:
        f = p.flags.flag_for_env(name)
        need = p.resource_flags.get(f.key) if f is not None else None
        if need is not None and value.lower() not in ("", "0", "false", "off", "no"):
            found.setdefault(need, name)
    return tuple(sorted(found.items()))


def threads_of(p: ExecutorProfile, items: Sequence[Item]) -> int:
    for it in reversed(items):
        if it.key == p.threads_flag and it.values:
            try:
                return max(int(it.values[0]), 0)
            except ValueError:
                return 0
    return 0


def _raises_priority(values: Sequence[str]) -> bool:
    try:
        return int(values[0]) > 0 if values else False
    except ValueError:
        return True  # a value the executor will refuse: treat it as asking


def _runs_on_cpu(p: ExecutorProfile, items: Sequence[Item], env: Sequence[tuple[str, str]]) -> bool:
    if not p.cpu_only_args:
        return False
    wanted = p.flags.split_items(p.cpu_only_args, "profile")
    last = {it.key: it for it in items if it.key is not None}
    envmap = dict(env)
    for w in wanted:
        got = last.get(w.key or "")
        if got is not None:
            if (got.values, got.negated) != (w.values, w.negated):
                return False
            continue
        f = p.flags.flags.get(w.key or "")
        if f is None or not any(envmap.get(v) == "".join(w.values) for v in f.env):
            return False
    return True


def gpu_of(
    p: ExecutorProfile,
    plan: LaunchPlan,
    *,
    items: Sequence[Item],
    env: Sequence[tuple[str, str]],
    hw: Hardware | None,
    options: EmitOptions,
) -> tuple[Gpu | None, tuple[Origin, ...]]:
    if _runs_on_cpu(p, items, env):
        why = f"the plan runs on the CPU ({' '.join(p.cpu_only_args)})"
        return None, (Origin(field="gpu", value="none", source="plan", why=why),)
    if options.gpu_resource:
        count = options.gpu_count or 1
        value = f"{count} x {options.gpu_resource}"
        return Gpu(driver="", backend="", count=count, resource=options.gpu_resource), (
            Origin(field="gpu", value=value, source="option"),
        )
    if hw is None:
        raise EmitError(
            "the plan runs on a GPU, but no hardware file says which: give the one it was "
            "planned with (--hardware), or --gpu-resource"
        )
    return _probed_gpu(p, plan, hw, options)


def _probed_gpu(
    p: ExecutorProfile, plan: LaunchPlan, hw: Hardware, options: EmitOptions
) -> tuple[Gpu, tuple[Origin, ...]]:
    exe = hw.executor(plan.spec.kind)
    backends = exe.backends if exe is not None else ()
    present = [g.driver for g in hw.gpus]
    pair = _pair(backends, present)
    if pair is None:
        raise EmitError(
            "the plan runs on a GPU, but the hardware file pairs no GPU backend of "
            f"{p.binary} ({', '.join(backends) or 'none'}) with a GPU driver it has "
            f"({', '.join(present) or 'none'}); plan with --no-gpu, or give --gpu-resource"
        )
    backend, driver, drivers = pair
    count = options.gpu_count or present.count(driver)
    resource = GPU_RESOURCES.get(driver, "")
    why = (
        f"the {backend} backend of {exe.path if exe else p.binary} drives "
        f"{'/'.join(drivers)}; the hardware file has {present.count(driver)} "
        f"{driver} GPU(s)" + (" (count by option)" if options.gpu_count else "")
    )
    origins = [Origin(field="gpu", value=f"{count} x {driver}", source="probe", why=why)]
    if resource:
        why = f"the device plugin's resource for the {driver} driver"
        origins.append(Origin(field="gpu resource", value=resource, source="default", why=why))
    return Gpu(driver=driver, backend=backend, count=count, resource=resource), tuple(origins)


def _pair(
    backends: Sequence[str], present: Sequence[str]
) -> tuple[str, str, tuple[str, ...]] | None:
    """The first GPU backend the executor has whose driver the host has."""
    for backend, drivers in BACKEND_DRIVERS:
        if backend in backends:
            for driver in drivers:
                if driver in present:
                    return backend, driver, drivers
    return None
