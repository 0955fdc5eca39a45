"""What every adapter's `Instance` shows and decides the same way: its endpoint, its plan,
its exit, the last log lines, which signals may still go to its process group, and the
order of a stop, a kill and the reaping of the group. An adapter adds only the waiting, in
its own concurrency, and its own shielding from cancellation."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.launch import stop as policy
from exedra_engine._core.launch.actual import Actual
from exedra_engine._core.launch.readiness import busy_slots, prefix_of
from exedra_engine._core.plan.endpoint import Resolved
from exedra_engine._core.values import Endpoint, LaunchPlan, connect_host
from exedra_engine._shell import drive, notice
from exedra_engine._shell.child import ExitReason, group_alive, signal_group
from exedra_engine.constants import STOP_TIMEOUT

DRAIN_POLL: Final = 0.1
"""How often a draining stop asks whether the executor is still busy."""


class Lines(Protocol):
    """An adapter's log pump, as an instance reports it."""

    @property
    def tail(self) -> tuple[str, ...]:
        """The last lines, redacted."""
        ...

    @property
    def dropped(self) -> int:
        """Lines not forwarded because the consumer fell behind."""
        ...


class InstanceState:
    """One executor process, whatever runs it. Adapters subclass it."""

    def __init__(
        self,
        plan: LaunchPlan,
        resolved: Resolved,
        pid: int,
        lines: Lines,
        *,
        stop_timeout: float = STOP_TIMEOUT,
        executors: Executors = BUILTIN,
    ) -> None:
        self._plan = plan
        self.profile: ExecutorProfile = executors.profile(plan.spec.kind)
        """The profile of the plan's executor."""
        self._resolved = resolved
        self._pid = pid
        self._lines = lines
        self._sent: frozenset[str] = frozenset()
        self._stop_requested = False
        self._exit: ExitReason | None = None
        self.ready_at: float | None = None
        """When the ready path first answered 200, on the adapter's clock."""
        self.ready_connections = 0
        """TCP connections the readiness poll opened (one, unless the executor closed it)."""
        self.stop_timeout = stop_timeout
        """The grace period used when the owner goes away under a running child."""
        self.actual: Actual | None = None
        """What the executor really runs with, read once it was ready (None before)."""

    @property
    def resolved(self) -> Resolved:
        """The endpoint as read back from the plan (host, port, keys)."""
        return self._resolved

    @property
    def endpoint(self) -> Endpoint:
        """The instance's address and API key."""
        return Endpoint(url=self._resolved.url, api_key=self._resolved.api_key)

    @property
    def pid(self) -> int:
        """The executor's process id (also its process group id)."""
        return self._pid

    @property
    def plan(self) -> LaunchPlan:
        """The plan this instance runs (immutable)."""
        return self._plan

    @property
    def exit_reason(self) -> ExitReason | None:
        """How the process ended; None while it runs."""
        return self._exit

    @property
    def log_tail(self) -> tuple[str, ...]:
        """The last lines the executor wrote (secrets redacted)."""
        return self._lines.tail

    @property
    def dropped_log_lines(self) -> int:
        """Lines not forwarded to `logs` because the consumer fell behind."""
        return self._lines.dropped

    def has_exited(self) -> bool:
        """Whether the process has ended (and its group is gone)."""
        return self._exit is not None

    def send_signal(self, name: str) -> None:
        """Send signal `name` (``SIGTERM``) to the process group; a second SIGTERM is not
        sent (llama-server takes it as "exit 1 now")."""
        if self._exit is None and policy.should_send(name, self._sent):
            self._sent |= {name}
            signal_group(self._pid, name)

    async def stop_sequence(
        self,
        timeout: float,
        loop: drive.Loop,
        gone_within: Callable[[float], Awaitable[bool]],
        *,
        drain: float = 0.0,
    ) -> None:
        """`stop`'s policy: with `drain`, first wait up to that many seconds until the
        executor works on no request (`wait_idle`); wait out the window after readiness in
        which a SIGTERM is lost (`policy.SETTLE`); then one SIGTERM and SIGKILL after
        `timeout`. `gone_within(s)`: whether the process and its group are gone within ``s``
        seconds."""
        if drain > 0 and not self.has_exited():
            await self._drain(drain, loop)
        settle = policy.settle_left(self.ready_at, loop.now())
        if not self.has_exited() and settle > 0:
            await gone_within(settle)
        if not self.has_exited():
            self._stop_requested = True
            steps = policy.stop_steps(timeout, sent=self._sent)
            await drive.run_stop(steps, self.send_signal, gone_within)

    async def wait_idle(
        self, loop: drive.Loop, polled: Callable[[int | None], None] = lambda busy: None
    ) -> None:
        """Return once the executor works on no request (llama-server's ``/slots``), or
        cannot tell: a drain then stops it rather than wait blind. `polled` hears each
        answer: the number of busy slots, None when the executor cannot tell."""
        profile = self.profile
        if not profile.slots_path:
            polled(None)
            return
        path = prefix_of(self._plan.ready, profile.ready_path) + profile.slots_path
        r = self._resolved
        while not self.has_exited():
            slots = await drive.get_json(
                loop, connect_host(r.host), r.port, path, key=r.api_key, timeout=1.0
            )
            busy = None if slots is None else busy_slots(slots, profile.slot_busy_field)
            polled(busy)
            if not busy:
                return
            await loop.sleep(DRAIN_POLL)

    async def _drain(self, seconds: float, loop: drive.Loop) -> None:
        """`wait_idle` for up to `seconds`, saying (`notice`) how many slots are busy when it
        begins and how long it waited when it ends: a draining stop is otherwise silent."""
        start = loop.now()
        seen: list[int | None] = []

        def polled(busy: int | None) -> None:
            if not seen and busy:
                notice.say(f"draining: {_slots(busy)} busy; waiting up to {seconds:g} s")
            seen.append(busy)

        async def idle() -> bool:
            await self.wait_idle(loop, polled)
            return True

        done = await loop.within(seconds, idle())
        notice.say(_drained(seen, done is not None, loop.now() - start, seconds))

    async def kill_sequence(self, gone_within: Callable[[float], Awaitable[bool]]) -> None:
        """SIGKILL now, and wait for the end (a launch that failed or was cancelled: no
        grace, the executor never served anyone)."""
        self._stop_requested = True
        await drive.run_stop(policy.stop_steps(0), self.send_signal, gone_within)

    async def reap_sequence(self, group_gone_within: Callable[[float], Awaitable[bool]]) -> None:
        """Once the leader has exited: wait until no process of its group is left (a forked
        helper can outlive it by a millisecond or for ever), by the same policy as the
        leader, SIGKILL included; a process stuck in D state is given up after
        `policy.GROUP_KILL_WAIT`. `group_gone_within(s)`: whether the group is gone within
        ``s`` seconds."""
        pgid = self._pid
        if group_alive(pgid):
            steps = policy.stop_steps(
                self.stop_timeout, sent=self._sent, kill_wait=policy.GROUP_KILL_WAIT
            )
            # The leader is gone, so the group is signalled directly (send_signal only signals
            # a running instance).
            await drive.run_stop(steps, lambda name: signal_group(pgid, name), group_gone_within)

    def _ended(self, returncode: int) -> ExitReason:
        """Record the exit (the group is gone by now)."""
        self._exit = ExitReason(returncode=returncode, requested=self._stop_requested)
        return self._exit

    def __repr__(self) -> str:
        state = "running" if self._exit is None else self._exit.describe()
        return f"<Instance pid={self.pid} {self.endpoint.url} {state}>"


def _slots(n: int) -> str:
    return f"{n} slot{'s' if n != 1 else ''}"


def _drained(seen: list[int | None], idle: bool, waited: float, seconds: float) -> str:
    """What a drain ends with, from the busy slots of each poll (None: no answer)."""
    first, last = (seen[0], seen[-1]) if seen else (None, None)
    if not idle:
        what = f"{_slots(last)} still busy" if last else "no answer"
        return f"drain: {what} after {seconds:g} s: stopping it anyway"
    if first is None:
        return "drain: the executor does not say whether it is busy: stopping it now"
    if first == 0:
        return "drain: no request in progress: stopping it now"
    if last == 0:
        return (
            f"drained: idle after {waited:.1f} s ({_slots(first)} busy when it began): stopping it"
        )
    return f"drain: the executor stopped answering after {waited:.1f} s: stopping it"
