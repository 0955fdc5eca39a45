"""An executor whose helper leaves its process group and session (``setsid sleep 120 &``,
as servers that daemonise a helper do) holds the log pipe open and is out of ``killpg``'s
reach. On every adapter and in the CLI: the launch still ends within the ready timeout plus
the stop deadline, and the helper is gone when it does (no zombie, no child left)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

import exedra_engine as engine
from exedra_engine.testing import free_port
from tests.adapters.test_conformance import Adapter, Running, adapter, alive, fake
from tests.conftest import FAKE

__all__ = ["adapter", "fake"]  # fixtures, used by name

STOP = 2.0
"""The stop deadline these launches are given."""


@pytest.fixture
def helper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], int]]:
    """The escaped helper's pid, once the fake executor has written it; the helper is
    killed afterwards if a failing test left it."""
    path = tmp_path / "helper.pid"
    monkeypatch.setenv("FAKE_CHILD_FILE", str(path))

    def pid() -> int:
        deadline = time.monotonic() + 5
        while not path.exists() or not path.read_text():
            assert time.monotonic() < deadline, "the executor never started its helper"
            time.sleep(0.01)
        return int(path.read_text())

    yield pid
    if path.exists() and path.read_text():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(path.read_text()), signal.SIGKILL)


def test_an_escaped_helper_does_not_hold_a_failed_launch(
    adapter: Adapter, fake: Callable[..., engine.LaunchPlan], helper: Callable[[], int]
) -> None:
    t = time.monotonic()
    err = adapter.failure(fake("escape-die"), ready_timeout=5, stop_timeout=STOP)
    took = time.monotonic() - t
    assert isinstance(err, engine.NotReady) and "(exit 3)" in str(err), err
    assert took < 5 + STOP, took
    assert not alive(helper())


def test_an_escaped_helper_does_not_outlive_the_ready_timeout(
    adapter: Adapter, fake: Callable[..., engine.LaunchPlan], helper: Callable[[], int]
) -> None:
    t = time.monotonic()
    err = adapter.failure(fake("escape-hang"), ready_timeout=1, stop_timeout=STOP)
    took = time.monotonic() - t
    assert isinstance(err, engine.NotReady) and "did not answer" in str(err), err
    assert 1 <= took < 1 + STOP, took
    assert not alive(helper())


def test_the_log_pipe_held_by_a_helper_nothing_can_find_does_not_hold_a_launch(
    adapter: Adapter, fake: Callable[..., engine.LaunchPlan], helper: Callable[[], int]
) -> None:
    # The helper empties its environment and leaves before any walk could see it: no marker,
    # no parent link. It keeps the pipe open; the drain of the pipe is bounded (1 s).
    t = time.monotonic()
    err = adapter.failure(fake("escape-bare-die"), ready_timeout=5, stop_timeout=STOP)
    took = time.monotonic() - t
    assert isinstance(err, engine.NotReady) and "(exit 3)" in str(err), err
    assert took < 1 + 1 + 1.5, took  # the pipe's drain, the exit's log drain, slack
    pid = helper()
    # Killed if it is still there (it went to init, which reaps it).
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


@pytest.mark.parametrize("mode", ["escape-ok", "escape-bare"])
def test_a_stop_reaches_a_helper_that_left_the_group_and_session(
    adapter: Adapter,
    fake: Callable[..., engine.LaunchPlan],
    helper: Callable[[], int],
    mode: str,
) -> None:
    # escape-bare empties the helper's environment: it is found by the walk from the live
    # executor, not by the marker it inherits.
    def stop(inst: Running) -> tuple[bool, float]:
        pid = helper()
        assert os.getpgid(pid) != inst.pid
        t = time.monotonic()
        inst.stop(STOP)
        return alive(pid), time.monotonic() - t

    (left, took), ended = adapter.session(fake(mode), stop, stop_timeout=STOP)
    assert not left and took < STOP
    assert ended.exit_reason is not None and ended.exit_reason.clean


@pytest.mark.parametrize(("mode", "ready_timeout"), [("escape-die", 5), ("escape-hang", 1)])
def test_cli_launch_ends_with_an_escaped_helper(
    tiny_llama: Path, helper: Callable[[], int], mode: str, ready_timeout: int
) -> None:
    t = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "exedra_engine",
            "launch",
            "--model",
            str(tiny_llama),
            "--kind",
            "llama",
            "--no-config",
            "--executor",
            str(FAKE),
            "--ready-timeout",
            str(ready_timeout),
            "--stop-timeout",
            str(STOP),
            # Its own port: a scanned one can be taken by another suite on this host between
            # plan and bind, and a stranger's 200 there would make this launch "ready".
            "--port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "FAKE_MODE": mode},
    )
    took = time.monotonic() - t
    assert r.returncode == 1, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("exedra-engine: error:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    # The interpreter's own start and the plan come on top of the launch's bound.
    assert took < ready_timeout + STOP + 5, took
    assert not alive(helper())


def test_the_callers_own_children_keep_their_exit_status_while_an_executor_runs(
    adapter: Adapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    # While an executor runs, this process must reap only what the executor started, never
    # a caller's own child (waitpid(-1) would steal its status, and Popen would then say 0).
    def body(inst: Running) -> tuple[int, int]:
        mine = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
        deadline = time.monotonic() + 5
        while psutil.Process(mine.pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        inst.stop(STOP)  # walks /proc and reaps the executor's tree while ours is a zombie
        return mine.wait(), mine.pid

    (code, _), _ = adapter.session(fake("escape-ok"), body, stop_timeout=STOP)
    assert code == 7


def _zombie_children() -> list[int]:
    out = []
    for c in psutil.Process().children():
        with contextlib.suppress(psutil.NoSuchProcess):
            if c.status() == psutil.STATUS_ZOMBIE:
                out.append(c.pid)
    return out


def test_the_callers_own_orphans_are_not_left_zombies_while_an_executor_runs(
    adapter: Adapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    # Each sh exits at once, orphaning its sleep: nothing of this process may adopt it (a
    # process-wide subreaper would, and left every one a zombie for the caller's life).
    def body(inst: Running) -> list[int]:
        for _ in range(20):
            subprocess.run(["sh", "-c", "sleep 0.05 &"], check=True)
        time.sleep(0.5)
        return _zombie_children()

    during, ended = adapter.session(fake("escape-ok"), body, stop_timeout=STOP)
    assert during == [] and _zombie_children() == []
    assert ended.exit_reason is not None and ended.exit_reason.clean
