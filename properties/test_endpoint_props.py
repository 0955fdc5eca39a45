"""Endpoint resolution against the independent model, and a sample against the real
llama-server: where it really listens and which key it really accepts (issue 5: 2)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Failure

from exedra_engine import Kind, resolve_endpoint
from properties import executor_model
from properties.conftest import scaled
from properties.strategies import argv, env, keys

ROOT = Path(__file__).resolve().parent.parent


@st.composite
def endpoint_inputs(draw: st.DrawFn) -> tuple[tuple[str, ...], dict[str, str]]:
    args = draw(argv(max_size=5))
    e = draw(env())
    if draw(st.booleans()):
        args = (*args, "--api-key", ",".join(draw(st.lists(keys, min_size=1, max_size=2))))
    if draw(st.booleans()):
        e["LLAMA_API_KEY"] = draw(keys)
    if draw(st.booleans()):
        e["LLAMA_ARG_PORT"] = draw(st.sampled_from(["8080", " 9000", "9001x", "abc", "0"]))
    return args, e


@given(endpoint_inputs())
def test_resolution_equals_the_model(inputs: Any) -> None:
    args, e = inputs
    r = resolve_endpoint(Kind.LLAMA, args, e)
    try:
        host, port, accepted = executor_model.listen(args, e)
    except executor_model.Refused:
        assert isinstance(r, Failure)
        return
    got = r.unwrap()
    assert (got.host, got.port, list(got.api_keys)) == (host, port, accepted)


def _binary() -> str:
    # ./dev puts the directory scripts/install-executors.sh printed in EXEDRA_EXECUTORS_BIN
    # and first on PATH (the builds live in the user cache).
    bin_dir = os.environ.get("EXEDRA_EXECUTORS_BIN")
    p = Path(bin_dir) / "llama-server" if bin_dir else None
    found = str(p) if p and os.access(p, os.X_OK) else shutil.which("llama-server")
    if not found:
        pytest.fail("llama-server is not installed: run ./dev test", pytrace=False)
    return found


def _status(url: str, key: str | None) -> int:
    req = urllib.request.Request(url + "/props")
    if key is not None:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@st.composite
def real_inputs(draw: st.DrawFn) -> tuple[list[str], dict[str, str]]:
    # Only flags the real binary accepts, on loopback, on ports that are free here.
    base = draw(st.integers(24000, 24900))
    args: list[str] = []
    e: dict[str, str] = {}
    if draw(st.booleans()):
        e["LLAMA_ARG_PORT"] = str(base)
    for i in range(draw(st.integers(0 if e else 1, 3))):
        args += ["--port", str(base + 1 + i) + draw(st.sampled_from(["", "", "x"]))]
    if draw(st.booleans()):
        e["LLAMA_ARG_HOST"] = "127.0.0.1"
    if draw(st.booleans()):
        args += ["--host", draw(st.sampled_from(["127.0.0.1", "0.0.0.0"]))]
    if draw(st.booleans()):
        e["LLAMA_API_KEY"] = draw(keys)
    for _ in range(draw(st.integers(0, 2))):
        args += ["--api-key", ",".join(draw(st.lists(keys, min_size=1, max_size=2)))]
    return args, e


@settings(max_examples=scaled(6))
@given(real_inputs())
def test_the_real_llama_server_agrees(tiny_model: Path, inputs: Any) -> None:
    args, e = inputs
    r = resolve_endpoint(Kind.LLAMA, args, e).unwrap()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
    proc = subprocess.Popen(
        [_binary(), "-m", str(tiny_model), "--no-webui", *args],
        env={**clean, **e},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with urllib.request.urlopen(r.url + "/health", timeout=1) as resp:
                    if resp.status == 200 and json.loads(resp.read())["status"] == "ok":
                        break
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                pass
            assert proc.poll() is None, f"llama-server exited {proc.returncode}"
            assert time.monotonic() < deadline, f"nothing answered on {r.url}"
            time.sleep(0.01)
        for k in r.api_keys:
            assert _status(r.url, k) == 200
        assert _status(r.url, "not-a-key") == (401 if r.api_keys else 200)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from exedra_engine.testing import write_tiny_llama

    return write_tiny_llama(tmp_path_factory.mktemp("m") / "tiny.gguf")
