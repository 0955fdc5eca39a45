"""Issue 18, items 3 and 4: SIGINT and SIGTERM honoured in every phase of ``launch`` and
``demo`` (planning, spawning, loading, serving, stopping), with the real llama-server on the
real Gemma model (a load of seconds), each in a process of its own, signalled as a
supervisor signals its main process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import Run


@pytest.fixture(autouse=True)
def _versions_cached(llama_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The executors' ``--version`` answers cached, as after any first run: a child of the
    launcher is then its executor, never a probe."""
    from exedra_engine._shell.probe import host_hardware

    monkeypatch.setenv("PATH", _env(llama_server)["PATH"])
    host_hardware()


def _children(pid: int) -> set[int]:
    # The executor is forked by a thread of the launcher: every task's children count.
    out: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out.update(int(c) for c in f.read().split())
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _executors(pid: int) -> set[int]:
    """The launcher's children that run (or are about to exec) an executor on a model."""
    out = set()
    python = os.path.realpath(sys.executable)
    for k in _children(pid):
        try:
            # Exec'd (a fork not yet exec'd shows the launcher's own argv, --model included).
            if os.path.realpath(f"/proc/{k}/exe") == python:
                continue
            with open(f"/proc/{k}/cmdline", "rb") as f:
                if b"--model" in f.read().split(b"\0"):
                    out.add(k)
        except OSError:
            pass
    return out


def _until(cond: Callable[[], object], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {cond}")
        time.sleep(0.002)


def _env(llama_server: str, stub_dir: Path | None = None) -> dict[str, str]:
    path = os.pathsep.join(
        [*([str(stub_dir)] if stub_dir else []), str(Path(llama_server).parent), os.environ["PATH"]]
    )
    return {**os.environ, "PATH": path}


_started: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_launcher_left() -> Iterator[None]:
    """A test that fails before its signal must not leave a launcher serving for ever."""
    yield
    while _started:
        p = _started.pop()
        if p.poll() is None:
            p.terminate()
            try:
                p.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()


def _start(argv: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-m", "exedra_engine", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    _started.append(p)
    return p


def _launch_argv(model: Path, llama_server: str) -> list[str]:
    return [
        "launch",
        "--model",
        str(model),
        "--kind",
        "llama",
        "--no-config",
        "--executor",
        llama_server,
        "--quiet",
    ]


def _hanging_version_stub(tmp_path: Path) -> tuple[Path, Path]:
    """A llama-server, first on PATH, whose ``--version`` hangs: the probe of the planning
    phase waits on it (the launch itself runs the real one, given by --executor), and the
    file it writes says when, and which process must be gone afterwards."""
    stub_dir = tmp_path / "stub"
    stub_dir.mkdir()
    marker = tmp_path / "stub.pid"
    stub = stub_dir / "llama-server"
    stub.write_text(
        f"#!/bin/sh\necho $$ > {marker}.tmp && mv {marker}.tmp {marker}\nexec sleep 60\n"
    )
    stub.chmod(0o755)
    return stub_dir, marker


SIGS = [signal.SIGINT, signal.SIGTERM]


@pytest.mark.parametrize("sig", SIGS, ids=lambda s: s.name)
def test_launch_signal_while_planning(
    sig: signal.Signals, real_model: Path, llama_server: str, tmp_path: Path
) -> None:
    stub_dir, marker = _hanging_version_stub(tmp_path)
    env = {**_env(llama_server, stub_dir), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    p = _start(_launch_argv(real_model, llama_server), env)
    _until(marker.exists)
    stub = int(marker.read_text())
    t = time.monotonic()
    p.send_signal(sig)
    out, err = p.communicate(timeout=20)
    assert time.monotonic() - t < 2.0
    assert p.returncode == 128 + sig, err
    assert f"interrupted by {sig.name} while planning; nothing was started" in err
    assert out == ""
    _until(lambda: not _alive(stub), 5)  # the hung --version does not outlive the command


@pytest.mark.parametrize("sig", SIGS, ids=lambda s: s.name)
def test_launch_signal_while_spawning(
    sig: signal.Signals, real_model: Path, llama_server: str
) -> None:
    p = _start(_launch_argv(real_model, llama_server), _env(llama_server))
    _until(lambda: _executors(p.pid) or p.poll() is not None)
    kids = _executors(p.pid)
    p.send_signal(sig)  # the executor has just been forked: it has not read the model yet
    out, err = p.communicate(timeout=20)
    assert p.returncode == 128 + sig, err
    assert f"interrupted by {sig.name} while starting; the executor was stopped" in err
    assert out == ""
    assert kids and not any(_alive(k) for k in kids)


@pytest.mark.parametrize("sig", SIGS, ids=lambda s: s.name)
def test_launch_signal_while_loading(
    sig: signal.Signals, real_model: Path, llama_server: str
) -> None:
    p = _start(_launch_argv(real_model, llama_server), _env(llama_server))
    _until(lambda: _executors(p.pid) or p.poll() is not None)
    kids = _executors(p.pid)
    # Into the load: Gemma is ready ~0.9 s after its start on a fast 2-core host, 3 s on others.
    time.sleep(0.25)
    assert p.poll() is None
    t = time.monotonic()
    p.send_signal(sig)
    out, err = p.communicate(timeout=20)
    took = time.monotonic() - t
    assert p.returncode == 128 + sig, err
    assert took < 1.5, f"took {took:.2f} s after the signal"
    assert "ready" not in out and f"interrupted by {sig.name} while starting" in err
    assert kids and not any(_alive(k) for k in kids)


def _until_ready(p: subprocess.Popen[str]) -> str:
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.startswith("ready     ") and " at http://127.0.0.1:" in line, line
    return line


@pytest.mark.parametrize("sig", SIGS, ids=lambda s: s.name)
def test_launch_signal_while_serving(
    sig: signal.Signals, real_model: Path, llama_server: str
) -> None:
    p = _start(_launch_argv(real_model, llama_server), _env(llama_server))
    _until_ready(p)
    kids = _children(p.pid)
    p.send_signal(sig)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "stopped   exit 0 after a stop request" in err
    assert kids and not any(_alive(k) for k in kids)


@pytest.mark.parametrize(
    "first,second", [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGINT)]
)
def test_second_signal_while_stopping_keeps_the_stopped_line(
    first: signal.Signals, second: signal.Signals, real_model: Path, llama_server: str
) -> None:
    p = _start(_launch_argv(real_model, llama_server), _env(llama_server))
    _until_ready(p)
    kids = _children(p.pid)
    p.send_signal(first)
    time.sleep(0.02)
    p.send_signal(second)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "stopped   exit 0 after a stop request" in err
    assert kids and not any(_alive(k) for k in kids)


def test_demo_signal_while_planning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Run
) -> None:
    # The demo's planning (writing its model, probing, planning) runs no child to wait on:
    # the signal is sent from inside it, in this process, deterministically.
    import exedra_engine.testing

    written = tmp_path / "written"

    def write_then_signalled(path: str) -> Path:
        written.write_text(os.path.dirname(path))
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # interrupted
        raise AssertionError("the signal did not interrupt the planning")

    monkeypatch.setattr(exedra_engine.testing, "write_tiny_llama", write_then_signalled)
    before = signal.getsignal(signal.SIGTERM)
    t = time.monotonic()
    r = run("demo")
    assert time.monotonic() - t < 5
    assert r.code == 128 + signal.SIGTERM, r.err
    assert "interrupted by SIGTERM while planning; nothing was started" in r.err
    assert not Path(written.read_text()).exists()  # its temporary directory is gone
    assert signal.getsignal(signal.SIGTERM) == before  # handlers restored


@pytest.mark.parametrize("sig", SIGS, ids=lambda s: s.name)
def test_demo_signal_while_starting(sig: signal.Signals, llama_server: str) -> None:
    p = _start(["demo"], _env(llama_server))
    _until(lambda: _executors(p.pid) or p.poll() is not None)
    kids = _executors(p.pid)
    p.send_signal(sig)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 128 + sig, err
    assert f"interrupted by {sig.name} while starting; the executor was stopped" in err
    assert kids and not any(_alive(k) for k in kids)


def test_demo_signal_while_serving(
    llama_server: str, monkeypatch: pytest.MonkeyPatch, run: Run
) -> None:
    # Serving, for the demo, is asking its question: the signal comes while the request
    # waits (sent from inside it), and the executor answering it is stopped.
    import socket

    import exedra_engine.cli.demo.demo_run as demo

    monkeypatch.setenv("PATH", _env(llama_server)["PATH"])
    asked: list[str] = []

    def ask_then_signalled(url: str, key: str, question: str) -> dict[str, object]:
        asked.append(url)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # a request that hangs: abandoned, not waited for
        raise AssertionError("the request was waited for")

    monkeypatch.setattr(demo, "ask", ask_then_signalled)
    t = time.monotonic()
    r = run("demo")
    assert time.monotonic() - t < 20
    assert r.code == 128 + signal.SIGTERM, r.err
    assert "interrupted by SIGTERM while serving; the executor was stopped" in r.err
    port = int(asked[0].rsplit(":", 1)[1])
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))
