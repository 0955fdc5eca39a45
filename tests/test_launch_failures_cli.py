"""Readable failures in the CLI (issue 21 item 2): the cause on the first line, the log tail
as real lines, redacted; ``--json`` as ``{"error": {...}}``. With the real llama-server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.executor


def _launch(model: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "exedra_engine",
            "launch",
            "--model",
            str(model),
            "--kind",
            "llama",
            "--api-key-env",
            "TEST_KEY",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "TEST_KEY": "sk-never-shown-123"},
    )


def test_refused_flag_text(llama_server: str, tiny_llama: Path) -> None:
    r = _launch(tiny_llama, "--arg=--ctx-szie", "--arg=64")
    assert r.returncode == 1
    err = r.stderr[r.stderr.index("exedra-engine: error:") :].splitlines()
    assert "refused the argument --ctx-szie" in err[0] and "did you mean --ctx-size?" in err[0]
    assert err[1] == "last log lines of the executor:"
    assert "  error: invalid argument: --ctx-szie" in err
    assert "\\n" not in r.stderr and "sk-never-shown-123" not in r.stderr


def test_refused_flag_json(llama_server: str, tiny_llama: Path) -> None:
    r = _launch(tiny_llama, "--arg=--ctx-szie", "--arg=64", "--json")
    assert r.returncode == 1
    body = json.loads(r.stdout)["error"]
    assert body["kind"] == "argument-refused" and body["flag"] == "--ctx-szie"
    assert body["suggestion"] == "--ctx-size" and body["layer"] == "caller"
    assert body["log"][-1] == "error: invalid argument: --ctx-szie"
    assert "sk-never-shown-123" not in r.stdout
