"""How long loading may take: one formula for the launcher's readiness deadline and the
emitters' start budgets (a Kubernetes startup probe, systemd's TimeoutStartSec). Pure."""

from __future__ import annotations

import math
from typing import Final

from exedra_engine._core.launch.readiness import LoadLimits
from exedra_engine._core.plan.launch_plan import LaunchPlan

START_BASE: Final = 60
"""Seconds of a start that do not depend on the model: process start, device init, warm-up."""
START_RATE: Final = 50 * 1024 * 1024
"""Bytes per second the model is read at, cold, from network storage (a slow PVC)."""
START_UNKNOWN: Final = 900
"""The budget when the model's size is unknown (planned without the file): 15 minutes."""


def load_budget(total_bytes: int) -> int:
    """Seconds to allow for loading `total_bytes` of model files (every shard, projector and
    draft): `START_BASE` + the bytes at `START_RATE`; `START_UNKNOWN` when the size is unknown."""
    if total_bytes <= 0:
        return START_UNKNOWN
    return START_BASE + math.ceil(total_bytes / START_RATE)


STALL: Final = 180
"""Seconds an executor may write nothing while loading before the load counts as hung. A
slow load keeps logging (llama-server prints progress dots while it reads tensors); three
minutes of silence is a hang, not a slow disk."""


def plan_bytes(plan: LaunchPlan) -> int:
    """The bytes the executor reads at load: every file of `plan.files` (shards, projector,
    draft), else the model's own size; 0 when unknown."""
    if plan.files:
        return sum(f.size for f in plan.files)
    return plan.model.size if plan.model is not None else 0


def load_limits(
    plan: LaunchPlan, ready_timeout: float | None = None, stall: float | None = None
) -> LoadLimits:
    """The limits of `plan`'s load: `ready_timeout` when given, else `load_budget` of its
    bytes; `stall` seconds of silence (default `STALL`)."""
    budget = float(load_budget(plan_bytes(plan))) if ready_timeout is None else ready_timeout
    return LoadLimits(budget=budget, stall=STALL if stall is None else stall)
