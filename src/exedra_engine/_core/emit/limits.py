"""Memory limits for the emitted units, from the plan's memory (`LaunchPlan.memory`). Pure.

The plan's ``memory.host.total`` is the expected resident peak of the executor (the figure a
cgroup counts; see `exedra_engine._core.memory.plan`). A limit exactly there would kill a
process whose peak the estimate missed by a little, so each limit adds a stated margin:

    margin  = max(20 % of the peak, 256 MiB)   the estimate's error (its goal is 10 %), the
                                               allocator's slack, the executor's own threads
    request = the peak                         what the scheduler must find free (Kubernetes)
    high    = the peak + margin / 2            where the kernel starts reclaiming (systemd)
    limit   = the peak + margin                where the cgroup is killed (every target)

Figures are rounded up to whole MiB. No memory plan (made without the model file, or an
executor whose memory is not estimated): no memory setting at all.
"""

from __future__ import annotations

import math

from exedra_engine._core.memory.settings import MIB
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.struct import Value, freeze

MARGIN_SHARE = 20
"""Per cent of the resident peak kept as margin."""
MARGIN_MIN = 256 * MIB
"""The least margin, bytes: a small model's estimate is off by a fixed amount, not a share."""


class MemoryLimits(Value, frozen=True, kw_only=True):
    """The memory settings of one unit, in MiB, and how they were found."""

    peak: int
    """The plan's expected resident peak (``memory.host.total``), MiB rounded up."""
    high: int
    limit: int
    margin: int
    why: str
    """The arithmetic, as ``--explain`` prints it."""


def memory_limits(plan: LaunchPlan) -> MemoryLimits | None:
    """The limits for `plan` (None when it has no memory plan)."""
    if plan.memory is None or plan.memory.host.total <= 0:
        return None
    total = plan.memory.host.total
    margin = max(total * MARGIN_SHARE // 100, MARGIN_MIN)
    peak = math.ceil(total / MIB)
    limit = math.ceil((total + margin) / MIB)
    high = math.ceil((total + margin // 2) / MIB)
    why = (
        f"memory.host.total {peak} MiB ({plan.memory.source}, ctx {plan.memory.ctx}) + margin "
        f"max({MARGIN_SHARE}%, {MARGIN_MIN // MIB} MiB) = {math.ceil(margin / MIB)} MiB"
    )
    return MemoryLimits(peak=peak, high=high, limit=limit, margin=math.ceil(margin / MIB), why=why)


def cpu_request(threads: int) -> str:
    """A Kubernetes CPU quantity for `threads` planned threads (one core each)."""
    return str(threads)


_K8S_UNITS = freeze(
    {
        "": 1,
        "k": 10**3,
        "M": 10**6,
        "G": 10**9,
        "T": 10**12,
        "Ki": 1024,
        "Mi": 1024**2,
        "Gi": 1024**3,
        "Ti": 1024**4,
    }
)
_SYSTEMD_UNITS = freeze({"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4})


def bytes_of(quantity: object, *, k8s: bool) -> int | None:
    """Bytes of a memory quantity as Kubernetes (``512Mi``, ``1G``) or systemd and podman
    (``512M``, base 1024) read it; None for what is not one (``infinity``, a percentage)."""
    text = str(quantity).strip()
    digits = len(text) - len(text.lstrip("0123456789"))
    number, unit = text[:digits], text[digits:]
    units = (
        _K8S_UNITS
        if k8s
        else {**_SYSTEMD_UNITS, **{k.lower(): v for k, v in _SYSTEMD_UNITS.items()}}
    )
    if not number or unit not in units:
        return None
    return int(number) * units[unit]
