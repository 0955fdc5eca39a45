"""Waiting for readiness: the poll loop (`until_ready`), one start's wait with its kill on
failure or cancellation (`await_ready`), and what the executor really runs with once ready
(`read_actual`). The request, intervals and deadlines are `exedra_engine._core.launch.
readiness`'s."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

from exedra_engine._core.launch import readiness
from exedra_engine._core.launch.actual import Actual, actual
from exedra_engine._core.launch.readiness import LoadLimits, field_at, prefix_of
from exedra_engine._core.values import connect_host
from exedra_engine._shell.launch.instance import InstanceState
from exedra_engine._shell.launch.loop import Loop
from exedra_engine._shell.launch.probe import ReadyProbe, get_json
from exedra_engine._shell.ports import ProcessSockets

Outcome = Literal["ready", "exited", "timeout", "stalled"]

ACTUAL_WAIT = 2.0
"""How long the executor may take to say what it runs with, once ready."""


class Probe(Protocol):
    """One adapter's ask of the ready path (on a kept-alive connection)."""

    port: int

    async def ready(self) -> bool:
        """One poll: True on 200; refused, 503, a timeout or a reset are "not yet"."""
        ...

    async def close(self) -> None:
        """Drop the connection (the next poll opens another)."""
        ...


class Waker(Protocol):
    """What the poll waits on between asks: a log line or the exit cuts the wait short
    (`loop.News`)."""

    @property
    def last_output(self) -> float:
        """When the executor last wrote something, on the adapter's clock."""
        ...

    async def wait(self, timeout: float) -> None:
        """Until news or `timeout`; news that came before the call counts."""
        ...


def owns_port(sockets: ProcessSockets, pid: int, port: int) -> bool:
    """Whether the socket listening on `port` is process `pid`'s (see
    `readiness.answered_by_executor`)."""
    listening = sockets.listener_inodes(port)
    held = sockets.socket_inodes(pid) if listening else None
    state = ""
    if held is None and listening:
        state = readiness.proc_state(sockets.read_text(f"/proc/{pid}/stat") or "")
    return readiness.answered_by_executor(listening, held, state)


async def until_ready(
    probe: Probe,
    news: Waker,
    inst: InstanceState[Any, Any],
    limits: LoadLimits,
    *,
    sockets: ProcessSockets,
    now: Callable[[], float],
    tick: Callable[[int, float], object] | None = None,
) -> Outcome:
    """Poll until the ready path answers 200 from `inst`'s process, it exits, or a
    limit of `limits` passes (counted from now). The poll is asked every
    `readiness.POLL_FIRST` s at first, backing off to `readiness.POLL_MAX`, and at once on
    news."""
    started = now()
    interval = readiness.POLL_FIRST
    while True:
        if inst.has_exited():
            return "exited"
        if await probe.ready():
            if owns_port(sockets, inst.pid, probe.port):
                return "ready"
            # Another process answered on our port: ours lost the bind, or has not bound
            # yet. Its exit, or its own answer, decides.
            await probe.close()
        t = now()
        if tick is not None:
            tick(inst.pid, t - started)  # the load's progress (`LaunchOptions.on_progress`)
        overdue = limits.overdue(started, news.last_output, t)
        if overdue is not None:
            return overdue
        await news.wait(min(interval, limits.left(started, news.last_output, t)))
        interval = readiness.next_interval(interval)


async def read_actual(inst: InstanceState[Any, Any], loop: Loop) -> Actual:
    """What the executor really did: its context (asked), its tree's peak memory (/proc)."""
    plan, r = inst.plan, inst.resolved
    profile = inst.profile
    ctx = None
    if profile.props_path:
        path = prefix_of(plan.ready, profile.ready_path) + profile.props_path
        props = await get_json(
            loop, connect_host(r.host), r.port, path, key=r.api_key, timeout=ACTUAL_WAIT
        )
        ctx = field_at(props, profile.props_ctx)
    peak = await loop.in_thread(inst.tree.peak_rss)
    return actual(plan, profile, ctx, peak)


async def await_ready(
    inst: InstanceState[Any, Any],
    news: Waker,
    limits: LoadLimits,
    sockets: ProcessSockets,
    loop: Loop,
    *,
    tick: Callable[[int, float], object] | None = None,
) -> Outcome:
    """One start's wait (`until_ready`, within `limits`): "ready" once `inst` is ready
    (`InstanceState.became_ready`, `runs_with`); else why not, once it is killed. A cancellation
    meanwhile kills it too, then propagates."""
    r = inst.resolved
    probe = ReadyProbe(connect_host(r.host), r.port, inst.plan.ready, loop)
    try:
        outcome = await until_ready(
            probe, news, inst, limits, sockets=sockets, now=loop.now, tick=tick
        )
    except BaseException:
        await inst.kill()  # cancelled while waiting: the child goes first
        raise
    finally:
        inst.polled(probe.connections)
        await probe.close()
    if outcome == "ready":
        inst.became_ready()
        inst.runs_with(await read_actual(inst, loop))
    else:
        await inst.kill()
    return outcome
