"""The memory share of a group plan: the budget the members share, what each needs at least
and wants at most, and how the budget is divided. Pure.

A member's weights do not flex; its automatic context and its ``--cache-ram`` do. So each
llama member has a floor (its smallest context, 4096 tokens or the model's own if smaller,
and no prompt cache; a context or cache a layer set stays) and a want (its plan alone on the
whole budget). A whisper-server member's estimate is fixed (`whisper_resident`). Shares:
every member gets its floor, and what the budget leaves beyond the floors is divided in
proportion to how much more each wants; when every want fits, each gets its want and the
rest of the budget in proportion to its want.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.gguf.inventory import ModelInventory
from exedra_engine._core.host.machine import OffloadDevice
from exedra_engine._core.launch.actual import Actual
from exedra_engine._core.memory.decide import settings_with, usable_host
from exedra_engine._core.memory.estimate import (
    estimate_from_settings,
)
from exedra_engine._core.memory.explain import size_text
from exedra_engine._core.memory.kv import FALLBACK_CTX
from exedra_engine._core.memory.plan import MemoryPlan
from exedra_engine._core.memory.settings import settings_of
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.values import Hardware
from exedra_engine.errors import DoesNotFit, PlanError

Running = LaunchPlan | Actual
"""An executor already running that a group joins: its plan, or what was measured of it
(`Instance.actual`)."""


_MAX_BYTES = 1 << 60
"""More memory than any host holds: a running executor said to hold more is a mistake."""


def check_running(running: Sequence[Running]) -> None:
    """`PlanError` naming the first of `running` that is not a running executor's plan or
    `Actual`, or whose figures no executor can hold (negative, beyond any host), or whose
    port is no TCP port."""
    for i, r in enumerate(running):
        if not isinstance(r, LaunchPlan | Actual):
            raise PlanError(
                f"running[{i}]: expected a LaunchPlan or an Actual, not {type(r).__name__}"
            )
        figures = (r.peak_rss, r.planned_rss) if isinstance(r, Actual) else ()
        for name, n in zip(("peak_rss", "planned_rss"), figures, strict=False):
            if n is not None and (isinstance(n, bool) or not 0 <= n <= _MAX_BYTES):
                raise PlanError(f"running[{i}]: {name} {n} is not a number of bytes a host holds")
        if not 0 <= r.port <= 65535:
            raise PlanError(f"running[{i}]: port {r.port} is not a TCP port")


def whisper_resident(profile: ExecutorProfile, file_size: int) -> int:
    """The resident peak of an executor estimated from its model file alone
    (`ExecutorProfile.resident_estimate`); 0 when it has no such estimate or the size is
    unknown."""
    fixed, per_mille = profile.resident_estimate
    if not file_size or not (fixed or per_mille):
        return 0
    return file_size + fixed + file_size * per_mille // 1000


def held_by(r: Running, profile_of: dict[str, ExecutorProfile]) -> tuple[int, tuple[int, ...]]:
    """The host bytes and each device's bytes a running executor holds at its peak: its
    measured peak when it was measured, else its plan's figures."""
    if isinstance(r, Actual):
        return (r.peak_rss or r.planned_rss or 0), ()
    if r.memory is not None:
        return r.memory.host.total, tuple(d.reserved for d in r.memory.devices)
    p = profile_of.get(r.spec.kind)
    size = r.files[0].size if r.files else 0
    return (whisper_resident(p, size) if p is not None else 0), ()


def group_budget(
    hw: Hardware, running: Sequence[Running], profile_of: dict[str, ExecutorProfile]
) -> tuple[int | None, str, tuple[int, ...]]:
    """The host memory the members share and how it was found (the budget a single plan
    uses: `usable_host`, less what `running` hold), and the running executors' bytes on
    each device."""
    usable, how = usable_host(hw)
    held = [held_by(r, profile_of) for r in running]
    host = sum(h for h, _ in held)
    width = max((len(d) for _, d in held), default=0)
    devices = tuple(sum(d[i] for _, d in held if i < len(d)) for i in range(width))
    if usable is None or not running:
        return usable, how, devices
    n = len(running)
    how = f"{how} - {size_text(host)} held by {n} running executor{'s' if n > 1 else ''}"
    return max(usable - host, 0), how, devices


def floor_memory(
    profile: ExecutorProfile,
    hw: Hardware,
    inv: ModelInventory,
    *,
    sides: Sequence[ModelInventory],
    items: Sequence[Item],
    env: Sequence[str],
) -> MemoryPlan:
    """The least a llama member can be planned with, from its merge (`items`, the merged
    argv as the table reads it, and `env`) before the memory decision: its smallest
    automatic context (`FALLBACK_CTX`, or the model's own when smaller) and no prompt
    cache, unless a layer set them."""
    s = settings_of(profile, items, env)
    extra: list[str] = []
    if not ("ctx" in s.explicit and s.ctx > 0):
        extra += [profile.memory_flags["ctx"], str(min(FALLBACK_CTX, inv.context or FALLBACK_CTX))]
    if "cache_ram" not in s.explicit:
        extra += [profile.memory_flags["cache_ram"], "0"]
    by_path = {side.paths[0]: side for side in sides}
    return estimate_from_settings(
        inv,
        settings_with(profile, s, extra),
        hw,
        profile,
        ctx=None,
        mmproj=by_path.get(s.mmproj) if s.mmproj else None,
        draft=by_path.get(s.draft) if s.draft else None,
    )


def shared_weights(
    ids: Sequence[str], files: Sequence[str], weights: Sequence[int]
) -> tuple[int, tuple[str, ...]]:
    """The bytes of mapped weights that members naming the same model file (`files[i]`, ""
    when none) count more than once in their resident totals (`weights[i]`, each member's
    host weights), and a note for each such file. llama.cpp maps the file: every process
    that maps it shares its page-cache pages, so its weights are held once whatever the
    number of members. Each later member's weights (up to the first one's) are counted
    again."""
    first: dict[str, int] = {}
    extra = 0
    notes: list[str] = []
    named: dict[str, list[str]] = {}
    for i, (path, w) in enumerate(zip(files, weights, strict=True)):
        if not path or not w:
            continue
        named.setdefault(path, []).append(ids[i])
        if path in first:
            extra += min(w, weights[first[path]])
        else:
            first[path] = i
    for path, who in named.items():
        if len(who) > 1:
            notes.append(
                f"{', '.join(who)} map the same model file ({path}): its weights, "
                f"{size_text(weights[first[path]])}, are counted once in the budget (the "
                "processes share its page-cache pages), so the shares sum to that much more "
                "than the budget"
            )
    return extra, tuple(notes)


def split_budget(budget: int, floors: Sequence[int], wants: Sequence[int]) -> tuple[int, ...]:
    """Each member's share of `budget` (at least its floor; the caller checked that the
    floors fit): when the wants fit, each want plus the rest in proportion to the wants;
    else each floor plus what is left in proportion to how much more each wants. Shares sum
    to at most `budget`; deterministic (largest remainder, ties to the earlier member)."""
    from exedra_engine._core.group.cpus import split_by_weight

    wants = [max(w, f) for w, f in zip(wants, floors, strict=True)]
    if sum(wants) <= budget:
        base, extra_weights = wants, wants
    else:
        base, extra_weights = list(floors), [w - f for w, f in zip(wants, floors, strict=True)]
    left = budget - sum(base)
    if left <= 0 or not any(extra_weights):
        return tuple(base)
    extra = split_by_weight(left, extra_weights)
    return tuple(b + e for b, e in zip(base, extra, strict=True))


class DeviceShares(NamedTuple):
    budgets: tuple[int, ...]
    """Each GPU's free memory, less what running executors reserve there (0: unknown)."""
    shares: tuple[tuple[int, ...], ...]
    """Each member's bytes of each GPU."""
    notes: tuple[str, ...]


def device_shares(
    ids: Sequence[str],
    plans: Sequence[LaunchPlan],
    hw: Hardware,
    held: tuple[int, ...],
    *,
    judged: Sequence[bool],
) -> DeviceShares:
    """Each GPU's budget and each member's share of it: what its plan reserves there, plus
    the rest in proportion. Reservations above a GPU's free memory are refused
    (`DoesNotFit`) when a member there is `judged` (its argv switched llama.cpp's fitter
    off, as a single plan is judged); otherwise the fitter keeps layers on the host for the
    members that start last, and the notes say so."""
    devices = group_devices(hw, [p.spec.kind for p in plans])
    n = len(devices)
    if n == 0:
        return DeviceShares((), tuple(() for _ in ids), ())
    notes: list[str] = []
    needs = [_reserved_per_device(p, n) for p in plans]
    budgets: list[int] = []
    columns: list[tuple[int, ...]] = []
    for j in range(n):
        have = max((devices[j].available or 0) - (held[j] if j < len(held) else 0), 0)
        col = [need[j] for need in needs]
        if have and sum(col) > have:
            notes.append(_over_device(ids, col, devices[j], j, have=have, judged=judged))
            columns.append(tuple(col))
        else:
            columns.append(split_budget(have, col, col) if have else tuple(col))
        budgets.append(have)
    shares = tuple(tuple(columns[j][i] for j in range(n)) for i in range(len(ids)))
    return DeviceShares(tuple(budgets), shares, tuple(notes))


def group_devices(hw: Hardware, kinds: Sequence[str]) -> tuple[OffloadDevice, ...]:
    """The devices a group's members share, in the order their plans number them: those
    of the first of `kinds` (the members', in order) whose executor has any
    (`Hardware.offload_devices`: its own device list, else the kernel's GPUs)."""
    for kind in dict.fromkeys(kinds):
        if devices := hw.offload_devices(kind):
            return devices
    return ()


def _reserved_per_device(plan: LaunchPlan, n: int) -> tuple[int, ...]:
    """What `plan` reserves on each of the host's `n` GPUs (0 where it says nothing)."""
    devices = plan.memory.devices if plan.memory is not None else ()
    return tuple(devices[j].reserved if j < len(devices) else 0 for j in range(n))


def _over_device(
    ids: Sequence[str],
    col: list[int],
    device: OffloadDevice,
    j: int,
    *,
    have: int,
    judged: Sequence[bool],
) -> str:
    """The note for GPU `j`, whose reservations `col` are above the `have` bytes free there;
    raises `DoesNotFit` instead when a member reserving there is judged."""
    named = sorted(zip(ids, col, strict=True), key=lambda t: (-t[1], t[0]))
    each = ", ".join(f"{i} {size_text(b)}" for i, b in named if b)
    named_as = device.name if device.listed else device.label
    said = (
        f"the group reserves {size_text(sum(col))} of GPU {j} ({named_as}) but "
        f"{size_text(have)} is free: {each}"
    )
    if any(judge and b for judge, b in zip(judged, col, strict=True)):
        raise DoesNotFit(said)
    return f"{said}; llama.cpp's fitter keeps layers on the host for the last"
