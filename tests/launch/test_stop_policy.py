"""The one stop policy and the launcher's deadlines, in trio's virtual time (MockClock).

The policy is tested on plain callables, with no process; the launcher's stop deadline on
the fake executor, with trio's clock jumping over the wait instead of sleeping through it.
"""

from __future__ import annotations

import math
import signal
import time

import pytest
import trio
import trio.testing

from exedra_engine import (
    CPU,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    ModelSpec,
    NotReady,
    launch,
    plan_launch,
)
from exedra_engine._core.launch.stop import stop_steps
from exedra_engine._shell.launch.instance import _drained
from exedra_engine._shell.launch.stopping import run_stop, set_within
from exedra_engine._trio.loop import LOOP
from tests.conftest import FAKE


class _Child:
    """Records what it was sent, in virtual time; dies on the signals it does not ignore."""

    def __init__(self, ignores: frozenset[int] = frozenset()) -> None:
        self.sent: list[tuple[str, float]] = []
        self.ignores = ignores
        self.gone = trio.Event()

    def send(self, name: str) -> None:
        self.sent.append((name, trio.current_time()))
        if signal.Signals[name] not in self.ignores:
            self.gone.set()


async def terminate(child: _Child, grace: float, *, kill_wait: float = math.inf) -> None:
    """The launch's stop sequence (`run_stop` over the policy's steps, on trio's clock),
    shielded as `Instance.stop` shields it."""

    async def within(seconds: float) -> bool:
        return await set_within(LOOP, seconds, child.gone)

    with trio.CancelScope(shield=True):
        await run_stop(stop_steps(grace, kill_wait=kill_wait), child.send, within)


async def test_a_child_that_obeys_gets_sigterm_only(autojump_clock: trio.testing.MockClock) -> None:
    child = _Child()
    await terminate(child, 10)
    assert child.sent == [("SIGTERM", 0.0)]


async def test_a_child_that_ignores_sigterm_is_killed_at_the_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    child = _Child(ignores=frozenset({signal.SIGTERM}))
    await terminate(child, 10)
    assert child.sent == [("SIGTERM", 0.0), ("SIGKILL", 10.0)]


async def test_no_grace_kills_at_once(autojump_clock: trio.testing.MockClock) -> None:
    child = _Child()
    await terminate(child, 0)
    assert child.sent == [("SIGKILL", 0.0)]


async def test_an_unkillable_child_is_given_up_after_kill_wait(
    autojump_clock: trio.testing.MockClock,
) -> None:
    child = _Child(ignores=frozenset({signal.SIGTERM, signal.SIGKILL}))
    await terminate(child, 5, kill_wait=1.0)
    assert child.sent == [("SIGTERM", 0.0), ("SIGKILL", 5.0)]
    assert trio.current_time() == 6.0


async def test_the_policy_completes_under_a_cancelled_caller(
    autojump_clock: trio.testing.MockClock,
) -> None:
    child = _Child(ignores=frozenset({signal.SIGTERM}))
    with trio.CancelScope() as scope:
        scope.cancel()
        await terminate(child, 3)
    assert child.sent == [("SIGTERM", 0.0), ("SIGKILL", 3.0)]


def _fake_plan(port_base: int) -> tuple[Hardware, ModelSpec]:
    hw = Hardware(cpu=CPU(threads=2), executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(FAKE)),))
    return hw, ModelSpec(path="/nonexistent/fake.gguf", kind=Kind.LLAMA)


async def test_an_hour_of_stop_timeout_passes_in_virtual_time(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Autojump only once every task has been blocked this long in real time, so the fake's
    # real start-up is waited for; the hour of grace is then jumped over.
    autojump_clock.autojump_threshold = 0.2
    monkeypatch.setenv("FAKE_MODE", "ignore-term")
    hw, spec = _fake_plan(42000)
    p = plan_launch(spec, hw, Constraints(port_base=42000)).unwrap()
    async with trio.open_nursery() as n:
        inst = (await launch(n, p)).unwrap()
        wall, virtual = time.monotonic(), trio.current_time()
        reason = await inst.stop(timeout=3600)
    assert reason.signal == signal.SIGKILL and reason.requested and not reason.clean
    assert trio.current_time() - virtual >= 3600
    assert time.monotonic() - wall < 30


async def test_the_ready_timeout_is_virtual_time_too(
    autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A child that never binds: every poll is refused at once, and the clock jumps each
    # poll interval (<= 5 ms) the moment the poller waits, so a minute passes in ~12,000 polls.
    autojump_clock.autojump_threshold = 0
    monkeypatch.setenv("FAKE_MODE", "hang")
    hw, spec = _fake_plan(42100)
    p = plan_launch(spec, hw, Constraints(port_base=42100)).unwrap()
    wall, virtual = time.monotonic(), trio.current_time()
    async with trio.open_nursery() as n:
        r = await launch(n, p, ready_timeout=60)
    err = r.failure()
    assert isinstance(err, NotReady) and "within 60 s" in str(err)
    assert trio.current_time() - virtual >= 60
    assert time.monotonic() - wall < 30


# -- a draining stop says what it waits for -----------------------------------------


def test_drain_end_lines() -> None:
    assert _drained([2, 1, 0], True, 3.25, 30) == (
        "drained: idle after 3.2 s (2 slots busy when it began): stopping it"
    )
    assert _drained([1, 1], False, 30.0, 30) == (
        "drain: 1 slot still busy after 30 s: stopping it anyway"
    )
    assert _drained([], False, 5.0, 5) == "drain: no answer after 5 s: stopping it anyway"
    assert _drained([0], True, 0.0, 5) == "drain: no request in progress: stopping it now"
    assert _drained([None], True, 0.0, 5).startswith("drain: the executor does not say")
    assert _drained([1, None], True, 1.0, 5).startswith("drain: the executor stopped answering")
