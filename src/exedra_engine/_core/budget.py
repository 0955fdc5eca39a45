"""How long loading may take: one formula for the launcher's readiness deadline and the
emitters' start budgets (a Kubernetes startup probe, systemd's TimeoutStartSec). Pure."""

from __future__ import annotations

import math

START_BASE = 60
"""Seconds of a start that do not depend on the model: process start, device init, warm-up."""
START_RATE = 50 * 1024 * 1024
"""Bytes per second the model is read at, cold, from network storage (a slow PVC)."""
START_UNKNOWN = 900
"""The budget when the model's size is unknown (planned without the file): 15 minutes."""


def load_budget(total_bytes: int) -> int:
    """Seconds to allow for loading `total_bytes` of model files (every shard, projector and
    draft): `START_BASE` + the bytes at `START_RATE`; `START_UNKNOWN` when the size is unknown."""
    if total_bytes <= 0:
        return START_UNKNOWN
    return START_BASE + math.ceil(total_bytes / START_RATE)
