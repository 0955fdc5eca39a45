"""The instance lifecycle as one state machine (`_core/launch/lifecycle.py`): every move
is in the table, anything else is refused, and what decides an instance's state (its exit,
the signals sent, the stop request) is the machine's; and the process port (`ProcessTree`)
can be faked, so a launch's signals are seen without touching /proc."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import trio

import exedra_engine as engine
from exedra_engine._core.launch.child import ChildSpec
from exedra_engine._core.launch.lifecycle import TRANSITIONS, Happening, Lifecycle, Phase
from exedra_engine._shell.launch import tree
from exedra_engine._shell.launch.options import LaunchOptions
from exedra_engine._shell.launch.tree import LocalTree, descendants, parse_stat
from tests.test_conformance import fake

__all__ = ["fake"]  # a fixture, used by name


def _drive(life: Lifecycle, happening: Happening) -> None:
    {
        Happening.READY: lambda: life.became_ready(1.0),
        Happening.STOP: life.stop_requested,
        Happening.EXIT: lambda: life.exited(0),
    }[happening]()


@pytest.mark.parametrize(("phase", "happening"), list(itertools.product(Phase, Happening)))
def test_every_move_is_the_tables_or_refused(phase: Phase, happening: Happening) -> None:
    life = Lifecycle()
    path = {
        Phase.STARTING: [],
        Phase.READY: [Happening.READY],
        Phase.STOPPING: [Happening.STOP],
        Phase.EXITED: [Happening.EXIT],
    }[phase]
    for h in path:
        _drive(life, h)
    assert life.phase is phase
    expected = TRANSITIONS.get((phase, happening))
    if expected is None:
        with pytest.raises(RuntimeError, match="cannot go from"):
            _drive(life, happening)
        assert life.phase is phase
    else:
        _drive(life, happening)
        assert life.phase is expected


def test_a_stop_before_the_exit_makes_the_exit_requested() -> None:
    life = Lifecycle()
    life.became_ready(2.5)
    life.stop_requested()
    life.exited(-15)
    assert life.phase is Phase.EXITED and life.requested and life.ready_at == 2.5
    assert life.has_exited() and life.returncode == -15


def test_an_exit_nobody_asked_for_is_not_requested_and_a_late_stop_changes_nothing() -> None:
    life = Lifecycle()
    life.exited(3)
    life.stop_requested()
    assert life.phase is Phase.EXITED and not life.requested and life.ready_at is None
    assert life.returncode == 3


def test_the_machine_decides_which_signal_may_go_once_and_none_after_the_exit() -> None:
    life = Lifecycle()
    assert not life.has_exited() and life.returncode is None
    assert life.may_signal("SIGTERM") and not life.may_signal("SIGTERM")
    assert life.may_signal("SIGKILL") and life.may_signal("SIGKILL")
    assert life.sent == {"SIGTERM", "SIGKILL"}
    life.exited(-9)
    assert not life.may_signal("SIGKILL") and not life.may_signal("SIGINT")
    assert life.sent == {"SIGTERM", "SIGKILL"}


def test_the_walk_follows_parent_links_and_reads_names_with_parens() -> None:
    raw = b"42 (we (ird) name) S 7 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0"
    stat = parse_stat(42, raw)
    assert stat is not None and (stat.state, stat.ppid, stat.pgrp, stat.start) == (
        "S",
        7,
        42,
        12345,
    )
    stats = {
        p: tree.Stat(p, "S", pp, p, 0) for p, pp in [(1, 0), (10, 1), (11, 10), (12, 11), (20, 1)]
    }
    assert descendants({10}, stats) == {10, 11, 12}
    assert descendants({99}, stats) == set()


def test_the_marker_finds_a_helper_that_left_the_session_after_its_parent_exited() -> None:
    # A helper re-parented to us (the subreaper) with nothing linking it to the executor
    # but the marker it inherited.
    tree.SUBREAPER.acquire()
    try:
        spec, marker = tree.marked(ChildSpec(argv=("x",), env=(("A", "1"),)))
        assert dict(spec.env)[tree.MARKER] == marker and dict(spec.env)["A"] == "1"
        script = "import subprocess, sys; subprocess.Popen(['setsid', 'sleep', '30']); sys.exit(0)"
        env = {**os.environ, tree.MARKER: marker}
        leader = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
        leader.wait()
        t = LocalTree(leader.pid, marker)
        (helper,) = t.members()
        assert os.getpgid(helper) != leader.pid and t.alive()
        t.signal("SIGKILL")
        deadline = time.monotonic() + 5
        while t.alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not t.alive()
        with pytest.raises(ChildProcessError):
            os.waitpid(helper, os.WNOHANG)  # reaped by the tree, not left a zombie
    finally:
        tree.SUBREAPER.release()


class _Recording:
    """A `ProcessTree` that records the signals a launch sends, then passes them on."""

    def __init__(self, real: tree.ProcessTree, sent: list[str]) -> None:
        self._real, self._sent = real, sent

    def signal(self, name: str) -> None:
        self._sent.append(name)
        self._real.signal(name)

    def alive(self) -> bool:
        return self._real.alive()

    def peak_rss(self) -> int | None:
        return self._real.peak_rss()

    def release(self) -> None:
        self._real.release()


def test_the_process_port_is_the_launchs_only_way_to_its_processes(
    fake: Callable[..., engine.LaunchPlan],
) -> None:
    sent: list[str] = []

    def spawn(spec: ChildSpec) -> tree.Started:
        popen, read, real = tree.start(spec)
        return popen, read, _Recording(real, sent)

    plan = fake("ignore-term")
    opts = LaunchOptions[None](spawn=spawn, stop_timeout=0.3)
    assert opts.spawn is spawn

    async def main() -> engine.ExitReason:
        from exedra_engine._trio.launcher import _supervise, graceful

        async with trio.open_nursery() as n:
            inst = await n.start(_supervise, plan, opts, graceful)
            return await inst.stop(0.3)

    reason = trio.run(main)
    assert sent == ["SIGTERM", "SIGKILL"]
    assert reason.signal == signal.SIGKILL and reason.requested
