"""Build hook: bake the packager's system config directory into the wheel.

Go's package lets build systems set DefaultConfigPath with -ldflags; this is the Python
equivalent. `EXEDRA_ENGINE_CONFIG_PATH=/usr/local/etc/exedra/engine.d python -m build`
writes exedra_engine/_sysconf.py into the wheel; without the variable the built-in
default (/etc/exedra/engine.d) stays in force.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class SysconfHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        path = os.environ.get("EXEDRA_ENGINE_CONFIG_PATH", "")
        if self.target_name != "wheel" or not path:
            return
        if not os.path.isabs(path):
            raise ValueError(f"EXEDRA_ENGINE_CONFIG_PATH must be absolute, got {path!r}")
        out = Path(tempfile.mkdtemp()) / "_sysconf.py"
        out.write_text(f"CONFIG_PATH = {path!r}\n", encoding="utf-8")
        build_data["force_include"][str(out)] = "exedra_engine/_sysconf.py"
