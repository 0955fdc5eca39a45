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

import psutil
import pytest
import trio

import exedra_engine as engine
from exedra_engine._core.launch.child import ChildSpec
from exedra_engine._core.launch.lifecycle import TRANSITIONS, Happening, Lifecycle, Phase
from exedra_engine._shell.launch import tree
from exedra_engine._shell.launch.options import LaunchOptions
from exedra_engine._shell.launch.tree import LocalTree, descendants, parse_stat
from tests.adapters.test_conformance import fake

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


def test_the_leaders_exit_is_known_before_its_tree_is_gone_without_ending_the_phase() -> None:
    life = Lifecycle()
    life.became_ready(1.0)
    life.leader_exited(3)
    assert life.returncode == 3 and life.phase is Phase.READY and not life.has_exited()
    assert life.may_signal("SIGKILL")  # what is left of its tree may still be signalled
    life.exited(3)
    assert life.has_exited() and life.returncode == 3


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
    # A helper that went to init (no subreaper here) with nothing linking it to the
    # executor but the marker it inherited.
    spec, marker = tree.marked(ChildSpec(argv=("x",), env=(("A", "1"),)))
    assert dict(spec.env)[tree.MARKER] == marker and dict(spec.env)["A"] == "1"
    script = "import subprocess, sys; subprocess.Popen(['setsid', 'sleep', '30']); sys.exit(0)"
    env = {**os.environ, tree.MARKER: marker}
    leader = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    leader.wait()
    t = LocalTree(leader.pid, marker, reaped=lambda: True)
    (helper,) = t.members()
    assert os.getpgid(helper) != leader.pid and t.alive()
    t.signal("SIGKILL")
    deadline = time.monotonic() + 5
    while t.alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not t.alive()
    with pytest.raises(ChildProcessError):
        os.waitpid(helper, os.WNOHANG)  # never ours: its new parent reaps it


def test_no_signal_reaches_a_process_that_took_the_reaped_leaders_pid() -> None:
    # The pid reused after the reap, by a stranger that leads its own group with a child in
    # it: the tree neither walks from that pid nor signals its group.
    stranger = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)
    try:
        time.sleep(0.2)
        kids = psutil.Process(stranger.pid).children()
        t = LocalTree(stranger.pid, "not-the-strangers-marker", reaped=lambda: True)
        assert t.members() == {} and not t.alive()
        t.signal("SIGKILL")
        time.sleep(0.2)
        assert stranger.poll() is None and all(k.is_running() for k in kids) and kids
    finally:
        os.killpg(stranger.pid, signal.SIGKILL)
        stranger.wait()


def test_a_process_is_signalled_only_while_it_is_the_one_the_walk_saw() -> None:
    p = subprocess.Popen(["sleep", "30"])
    try:
        start = tree.start_of(p.pid)
        assert start is not None
        tree.send(p.pid, start + 1, signal.SIGKILL)  # another start time: another process
        time.sleep(0.1)
        assert p.poll() is None
        tree.send(p.pid, start, signal.SIGKILL)
        assert p.wait(timeout=5) == -signal.SIGKILL
    finally:
        p.kill()
        p.wait()


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

    def leader_exited(self) -> None:
        self._real.leader_exited()

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


def _slow_spawn(pids: list[int]) -> Callable[[ChildSpec], tree.Started]:
    """A spawn whose fork is done 0.3 s after it was asked for (the caller is cancelled
    meanwhile)."""

    def spawn(spec: ChildSpec) -> tree.Started:
        popen, read, real = tree.start(spec)
        pids.append(popen.pid)
        time.sleep(0.3)
        return popen, read, real

    return spawn


def test_a_cancellation_during_the_fork_kills_the_child_once_it_is_someones(
    fake: Callable[..., engine.LaunchPlan],
) -> None:
    # The fork is never abandoned half-way: trio raises the cancellation at its next
    # checkpoint, asyncio asks for it again; either way the child is killed, not left.
    import asyncio

    from exedra_engine._aio.launcher import _start
    from exedra_engine._trio.launcher import _supervise, graceful

    plan = fake("hang")
    pids: list[int] = []
    opts = LaunchOptions[None](spawn=_slow_spawn(pids), stop_timeout=0.3)

    async def on_trio() -> bool:
        with trio.move_on_after(0.1) as scope:
            async with trio.open_nursery() as n:
                await n.start(_supervise, plan, opts, graceful)
        return scope.cancelled_caught

    async def on_asyncio() -> bool:
        try:
            async with asyncio.timeout(0.1):
                await _start(plan, opts)
        except TimeoutError:  # the cancellation counted once: asyncio.timeout still sees it
            return True
        return False

    assert trio.run(on_trio)
    assert asyncio.run(on_asyncio())
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(psutil.NoSuchProcess):
            psutil.Process(pid).status()
