"""The lookups of the real executors and the real model (`find_executor`, `find_real_model`),
and `free_port`: shared by the test fixtures and the benchmarks."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

REAL_MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"


def find_executor(name: str) -> Path | None:
    """The installed executor NAME: from EXEDRA_EXECUTORS_BIN (where ./dev puts the bin dir
    that scripts/install-executors.sh printed, in the user cache), else from PATH."""
    bin_dir = os.environ.get("EXEDRA_EXECUTORS_BIN")
    cached = Path(bin_dir) / name if bin_dir else None
    found = str(cached) if cached and os.access(cached, os.X_OK) else shutil.which(name)
    return Path(found) if found else None


def real_model_path() -> Path:
    """Where the real model (Gemma 3 270M Q4_K_M, scripts/fetch_model.py) is looked for:
    EXEDRA_TEST_MODEL, else the user cache."""
    env = os.environ.get("EXEDRA_TEST_MODEL")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return Path(env) if env else cache / "exedra-engine" / "models" / REAL_MODEL_NAME


def find_real_model() -> Path | None:
    """The real model if it is there."""
    path = real_model_path()
    return path if path.is_file() else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
