"""The CPU share of a group plan: which CPUs and how many threads each member gets. Pure.

Each member gets a contiguous run of the host's CPU ids (in member order), one CPU at least
and the rest divided by weight (largest remainder; a tie goes to the earlier member), and
as many threads as CPUs: two llama-servers that each spin a thread per core slow each other
down (docs/how-to/several-models.md). With fewer CPUs than members every member gets one
CPU, shared round-robin, and one thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.layers import Merged
from exedra_engine._core.struct import Value


class CpuShare(Value, frozen=True, kw_only=True):
    """One member's CPUs and threads."""

    cpus: tuple[int, ...]
    threads: int


def cpu_ids(cpus: Sequence[int]) -> tuple[int, ...]:
    """The CPU ids a caller gave (`plan_group`'s ``cpus=``), sorted and distinct; `PlanError`
    when there are none or one is no CPU id (negative, not an integer)."""
    from exedra_engine.errors import PlanError

    ids: tuple[object, ...] = tuple(cpus)  # a caller's list, whatever it holds
    if not ids:
        raise PlanError("cpus: no CPU ids (None: 0..CPU.threads-1)")
    for c in ids:
        if not isinstance(c, int) or isinstance(c, bool) or not 0 <= c < 1 << 16:
            raise PlanError(f"cpus: {c!r} is not a CPU id (an integer from 0)")
    return tuple(sorted({c for c in ids if isinstance(c, int)}))


def split_by_weight(total: int, weights: Sequence[int]) -> tuple[int, ...]:
    """`total` divided in proportion to `weights` by largest remainder: the parts sum to
    `total`; a tie in remainders goes to the earlier weight. Deterministic."""
    w = sum(weights)
    if not weights:
        return ()
    if w <= 0:
        weights, w = [1] * len(weights), len(weights)
    base = [total * wi // w for wi in weights]
    left = total - sum(base)
    order = sorted(range(len(weights)), key=lambda i: (-(total * weights[i] % w), i))
    for i in order[:left]:
        base[i] += 1
    return tuple(base)


def partition_cpus(
    ids: Sequence[int], threads: int, weights: Sequence[int]
) -> tuple[tuple[CpuShare, ...], tuple[str, ...]]:
    """Each member's `CpuShare` from the CPU ids the group may run on, the threads it may
    run (`CPU.threads`: below the number of ids under a cgroup CPU quota) and the members'
    weights; and what a reader should know about it."""
    m, n = len(weights), len(ids)
    if m == 0 or n == 0:
        return (), ()
    if n < m:
        shares = tuple(CpuShare(cpus=(ids[i % n],), threads=1) for i in range(m))
        note = (
            f"{m} members on {n} CPU{'s' if n > 1 else ''}: fewer CPUs than members, so each "
            "member gets one CPU, shared round-robin, and one thread"
        )
        return shares, (note,)
    counts = [1 + c for c in split_by_weight(n - m, weights)]
    out: list[CpuShare] = []
    start = 0
    # Under a CPU quota the members together run no more threads than the quota allows.
    budget = split_by_weight(min(threads, n), counts) if 0 < threads < n else tuple(counts)
    for count, t in zip(counts, budget, strict=True):
        out.append(CpuShare(cpus=tuple(ids[start : start + count]), threads=max(t, 1)))
        start += count
    notes: tuple[str, ...] = ()
    if 0 < threads < n:
        notes = (f"a CPU quota allows {threads} threads on {n} CPUs: threads divided the same way",)
    return tuple(out), notes


def cpu_set_text(cpus: Sequence[int]) -> str:
    """``0-3`` for a run of consecutive ids, else ``0,2,5``."""
    if not cpus:
        return ""
    if list(cpus) == list(range(cpus[0], cpus[0] + len(cpus))):
        return f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 1 else str(cpus[0])
    return ",".join(str(c) for c in cpus)


def pinning_args(
    profile: ExecutorProfile, share: CpuShare, *, threads_set: bool
) -> tuple[str, ...]:
    """The flags that give the executor its share, as far as its profile has them: the
    prompt-processing threads, the CPU set (a range, else a hex mask) and strict placement.
    The threads themselves are the engine layer's ``--threads`` (`Constraints.threads`);
    `threads_set`: the member set them itself (its own count is kept for both)."""
    p = profile
    out: list[str] = []
    if p.threads_batch_flag and not threads_set:
        out += [p.threads_batch_flag, str(share.threads)]
    cpus = share.cpus
    contiguous = list(cpus) == list(range(cpus[0], cpus[0] + len(cpus))) if cpus else False
    if cpus and contiguous and p.cpu_range_flag:
        out += [p.cpu_range_flag, f"{cpus[0]}-{cpus[-1]}"]
    elif cpus and p.cpu_mask_flag:
        out += [p.cpu_mask_flag, hex(sum(1 << c for c in set(cpus)))]
    else:
        return tuple(out)
    if p.cpu_strict_flag:
        out += [p.cpu_strict_flag, "1"]
    return tuple(out)


class OwnSetting(NamedTuple):
    """A flag or variable of a member's merge that sets its threads or CPUs (`own_cpu_setting`)."""

    layer: str
    """The name of the layer that set it."""
    name: str
    """The flag as that layer wrote it, or the variable."""
    key: str
    """The flag's canonical key (the flag a variable sets)."""
    at: int
    """Where the flag stands in its layer's args; -1 for a variable."""


def cpu_keys(profile: ExecutorProfile) -> frozenset[str]:
    """The canonical keys of the flags that set how many threads the executor runs or on
    which CPUs: its threads, prompt-processing threads, CPU range and mask, and
    `ExecutorProfile.cpu_flags` (strictness and priority change neither)."""
    p = profile
    names = (p.threads_flag, p.threads_batch_flag, p.cpu_range_flag, p.cpu_mask_flag)
    found = (p.flags.lookup(n) for n in (*names, *sorted(p.cpu_flags)) if n)
    return frozenset(f[0].key for f in found if f is not None)


def own_cpu_setting(profile: ExecutorProfile, m: Merged, engine: str) -> OwnSetting | None:
    """The first flag, then variable, of merge `m` that sets the executor's threads or CPUs
    (`cpu_keys`) and that a layer other than `engine` (the planner's own) put there; None
    when the planner's share stands. Read from the merge's provenance, not from an argv."""
    keys = cpu_keys(profile)
    for layer, it in zip(m.item_layers, m.items, strict=True):
        if it.key in keys and layer != engine:
            return OwnSetting(layer=layer, name=it.tokens[0], key=it.key, at=it.at)
    for name, layer in m.env_layers.items():
        flag = profile.flags.flag_for_env(name)
        if flag is not None and flag.key in keys and layer != engine:
            return OwnSetting(layer=layer, name=name, key=flag.key, at=-1)
    return None
