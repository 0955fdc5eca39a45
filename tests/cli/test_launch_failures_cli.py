"""Readable failures in the CLI: the cause on the first line, the log tail as real lines,
redacted; ``--json`` as ``{"error": {...}}``. With the real llama-server.

A flag the installed binary's own ``--help`` does not list is refused before anything starts
(exit 2). The executor's own refusal, after it started, is still read and reported: it is
reached here through a wrapper whose ``--help`` says nothing, so that the launch is judged by
the bundled table only (which warns, and starts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.executor


def _help_less(llama_server: str, tmp_path: Path) -> str:
    """llama-server behind a wrapper that answers ``--help`` with nothing."""
    wrapper = tmp_path / "llama-server"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = --help ] && exit 1\nexec {llama_server} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


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


def test_a_flag_the_binary_does_not_list_is_refused_before_it_starts(
    llama_server: str, tiny_llama: Path
) -> None:
    r = _launch(tiny_llama, "--arg=--ctx-szie", "--arg=64", "--executor", llama_server)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.splitlines()
    assert line.startswith("exedra-engine: error: --ctx-szie in caller args[0]: "), line
    assert "did you mean --ctx-size?" in line and f"{llama_server} --help" in line
    assert "nothing was started" in line and r.stdout == ""
    assert "sk-never-shown-123" not in r.stderr


def test_a_flag_the_binary_does_not_list_is_refused_before_it_starts_json(
    llama_server: str, tiny_llama: Path
) -> None:
    r = _launch(tiny_llama, "--arg=--ctx-szie", "--arg=64", "--executor", llama_server, "--json")
    assert r.returncode == 2, r.stderr
    body = json.loads(r.stdout)["error"]
    assert body["kind"] == "argument-refused" and body["flag"] == "--ctx-szie"
    assert body["suggestion"] == "--ctx-size" and body["layer"] == "caller args[0]"
    assert body["log"] == []  # nothing ran


def test_refused_flag_text(llama_server: str, tiny_llama: Path, tmp_path: Path) -> None:
    exe = _help_less(llama_server, tmp_path)
    r = _launch(tiny_llama, "--arg=--ctx-szie", "--arg=64", "--executor", exe)
    assert r.returncode == 1
    err = r.stderr[r.stderr.index("exedra-engine: error:") :].splitlines()
    assert "refused the argument --ctx-szie" in err[0] and "did you mean --ctx-size?" in err[0]
    assert err[1] == "last log lines of the executor:"
    assert "  error: invalid argument: --ctx-szie" in err
    assert "\\n" not in r.stderr and "sk-never-shown-123" not in r.stderr


def test_refused_flag_json(llama_server: str, tiny_llama: Path, tmp_path: Path) -> None:
    exe = _help_less(llama_server, tmp_path)
    r = _launch(tiny_llama, "--arg=--ctx-szie", "--arg=64", "--executor", exe, "--json")
    assert r.returncode == 1
    body = json.loads(r.stdout)["error"]
    assert body["kind"] == "argument-refused" and body["flag"] == "--ctx-szie"
    assert body["suggestion"] == "--ctx-size" and body["layer"] == "caller"
    assert body["log"][-1] == "error: invalid argument: --ctx-szie"
    assert "sk-never-shown-123" not in r.stdout


def test_threads_past_ggmls_cap_through_an_override_start_nothing(
    llama_server: str, tiny_llama: Path
) -> None:
    # `--threads 100000` is refused by the planner; the same through the caller's args, once
    # only warned about, reached llama-server, which aborted (std::bad_alloc).
    r = _launch(tiny_llama, "--arg=--threads", "--arg=100000", "--executor", llama_server)
    assert r.returncode == 2, r.stderr
    assert "--threads 100000 is more than 512" in r.stderr and "nothing was started" in r.stderr
