"""Moved to `exedra_engine._core.secrets` (the secret walker). This name stays only while
the launch restructuring still imports it; import from `exedra_engine._core.secrets`."""

from __future__ import annotations

from exedra_engine._core.secrets import *  # noqa: F403
from exedra_engine._core.secrets import __all__  # noqa: F401
