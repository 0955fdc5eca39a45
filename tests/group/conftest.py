"""Fixtures the group tests share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def hardware(tmp_path: Path) -> str:
    """Another host, with both executors, of 4 CPUs and 8 GiB (paths only: nothing is run)."""
    f = tmp_path / "hw.json"
    f.write_text(
        json.dumps(
            {
                "cpu": {"threads": 4, "ram": 8 << 30, "available": 6 << 30},
                "gpus": [],
                "executors": [
                    {"kind": "llama", "path": "/usr/bin/llama-server", "backends": ["cpu"]},
                    {"kind": "transcribe", "path": "/usr/bin/whisper-server"},
                ],
            }
        )
    )
    return str(f)
