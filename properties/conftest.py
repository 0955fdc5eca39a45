"""Hypothesis profiles. CI runs a fixed, derandomized budget so its time is predictable;
`just soak` (HYPOTHESIS_PROFILE=soak) runs 50x more, with fresh randomness.

    ci:   100 examples per property (fewer where an example starts a real executor),
          derandomized: the same cases every run.
    soak: 5000 examples per property, random, no deadline.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=100,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "soak",
    max_examples=5000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def scaled(n: int) -> int:
    """An example budget for costly properties, scaled with the profile."""
    return max(1, n * settings().max_examples // 100)
