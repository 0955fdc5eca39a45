"""What every adapter's `Instance` shows and decides the same way: its endpoint, its plan,
the last log lines, and the order of a stop, a kill and the reaping of the tree, shielded
from the caller's cancellation by the adapter's own primitive (`Loop.shielded`). Its state
(phase, exit, the signals sent, whether a stop was asked for) is its lifecycle's
(`_core.launch.lifecycle.Lifecycle`), which it asks and never second-guesses. An adapter
adds only `supervise`, its way of owning the process until the leader exits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar, Final, Generic, Protocol, TypedDict, TypeVar

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.launch import stop as policy
from exedra_engine._core.launch.actual import Actual
from exedra_engine._core.launch.lifecycle import Lifecycle, Phase
from exedra_engine._core.launch.readiness import busy_slots, prefix_of
from exedra_engine._core.plan.endpoint import Resolved
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.values import Endpoint, connect_host
from exedra_engine._shell import notice
from exedra_engine._shell.launch.child import ExitReason
from exedra_engine._shell.launch.loop import Event, Loop
from exedra_engine._shell.launch.probe import get_json
from exedra_engine._shell.launch.stopping import run_stop, set_within, tree_gone
from exedra_engine._shell.launch.tree import PIPE_DRAIN, ProcessTree
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

    @property
    def ended(self) -> Event:
        """Set once the output has ended (or was given up on)."""
        ...

    def stop_reading(self) -> None:
        """Give up on the rest of the output (a process nobody owns holds the pipe)."""
        ...


class Process(Protocol):
    """A started executor as an adapter holds it."""

    @property
    def pid(self) -> int: ...

    @property
    def tree(self) -> ProcessTree: ...


class Settings(TypedDict, total=False):
    """An instance's settings besides its process (`InstanceState`'s keywords)."""

    stop_timeout: float
    executors: Executors
    on_exit: Callable[[], None]


P = TypeVar("P", bound=Process)
Ln = TypeVar("Ln", bound=Lines)


class InstanceState(Generic[P, Ln]):
    """One executor process, whatever runs it. An adapter subclasses it with its kind of
    process (`P`) and log pump (`Ln`), and names its primitives (`loop`)."""

    loop: ClassVar[Loop]
    """The adapter's primitives."""

    def __init__(
        self,
        plan: LaunchPlan,
        resolved: Resolved,
        process: P,
        lines: Ln,
        *,
        stop_timeout: float = STOP_TIMEOUT,
        executors: Executors = BUILTIN,
        on_exit: Callable[[], None] = lambda: None,
    ) -> None:
        self._plan = plan
        self.profile: ExecutorProfile = executors.profile(plan.spec.kind)
        """The profile of the plan's executor."""
        self._resolved = resolved
        self._process = process
        self._pid = process.pid
        self._lines = lines
        self.tree = process.tree
        """Every process the executor started, wherever it went (`ProcessTree`)."""
        self._on_exit = on_exit
        self._loop = loop = self.loop
        self._life = Lifecycle()
        self._exit_calls: list[Callable[[ExitReason], object]] = []
        self._reason: ExitReason | None = None
        """The lifecycle's exit as a value, made once (a view: nothing decides from it)."""
        self._gone = loop.event()
        self._ready_connections = 0
        self._actual: Actual | None = None
        self.stop_timeout = stop_timeout
        """The grace period used when the owner goes away under a running child."""
        self.started_at = loop.now()
        """When it was started, on the adapter's clock."""

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
    def phase(self) -> Phase:
        """Where it stands: starting, ready, stopping, exited."""
        return self._life.phase

    @property
    def ready_at(self) -> float | None:
        """When the ready path first answered 200, on the adapter's clock."""
        return self._life.ready_at

    @property
    def ready_connections(self) -> int:
        """TCP connections the readiness poll opened (one, unless the executor closed it)."""
        return self._ready_connections

    @property
    def actual(self) -> Actual | None:
        """What the executor really runs with, read once it was ready (None before)."""
        return self._actual

    @property
    def exit_reason(self) -> ExitReason | None:
        """How the process ended; None while it runs."""
        return self._reason

    @property
    def log_tail(self) -> tuple[str, ...]:
        """The last lines the executor wrote (secrets redacted)."""
        return self._lines.tail

    @property
    def dropped_log_lines(self) -> int:
        """Lines not forwarded to `logs` because the consumer fell behind."""
        return self._lines.dropped

    def has_exited(self) -> bool:
        """Whether the process has ended (and its tree is gone): its lifecycle's phase is
        `Phase.EXITED`."""
        return self._life.has_exited()

    def polled(self, connections: int) -> None:
        """The readiness wait is over, having opened `connections` connections."""
        self._ready_connections = connections

    def became_ready(self) -> None:
        """The ready path answered 200, now."""
        self._life.became_ready(self._loop.now())

    def runs_with(self, actual: Actual) -> None:
        """What the executor was found to run with, once ready."""
        self._actual = actual

    def owner_gone(self) -> None:
        """Its owner is going away under it: the stop that follows is requested."""
        self._life.stop_requested()

    async def wait(self) -> None:
        """Return when the process has exited (and its tree is gone)."""
        await self._gone.wait()

    def when_exited(self, fn: Callable[[ExitReason], object]) -> None:
        """Call `fn` with the leader's exit once it has exited (at once if it has), before
        its tree is reaped: what a group needs to know of a member that dies while the
        others load."""
        code = self._life.returncode
        if code is None:
            self._exit_calls.append(fn)
        else:
            fn(self._reason or ExitReason(returncode=code, requested=self._life.requested))

    async def supervise(self) -> None:
        """Own the process until its leader exits and its tree is gone (one task per
        instance, run by the launch); when cancelled under a running child, stop it first.
        Each adapter waits for the exit its own way."""
        raise NotImplementedError

    async def stop(self, timeout: float = STOP_TIMEOUT, *, drain: float = 0.0) -> ExitReason:
        """One SIGTERM to the process group, SIGKILL if it is still running after `timeout`
        seconds. Idempotent, safe after the process died, and it completes even while the
        caller is being cancelled (the cancellation is seen after). With `drain`, first wait
        up to that many seconds until the executor works on no request (llama-server's
        ``/slots``), so a busy executor is stopped without cutting answers off."""
        return await self._loop.shielded(self._ended(self.stop_sequence(timeout, drain=drain)))

    async def kill(self) -> ExitReason:
        """SIGKILL to the process group now, and wait for its end (a launch that failed or
        was cancelled: no grace, the executor never served anyone); completes under a
        cancelled caller as `stop` does."""
        return await self._loop.shielded(self._ended(self.kill_sequence()))

    async def _ended(self, sequence: Awaitable[None]) -> ExitReason:
        await sequence
        await self.wait()
        reason = self.exit_reason
        assert reason is not None
        return reason

    def send_signal(self, name: str) -> None:
        """Send signal `name` (``SIGTERM``) to the process group and every process of the
        tree that left it, if the lifecycle allows it (`Lifecycle.may_signal`): never once
        the instance has exited, and never a second SIGTERM (llama-server takes it as "exit
        1 now")."""
        if self._life.may_signal(name):
            self.tree.signal(name)

    async def output_ended_within(self, seconds: float) -> bool:
        """Whether the executor's output has been read to its end within `seconds`."""
        return await set_within(self._loop, seconds, self._lines.ended)

    async def stop_sequence(
        self, timeout: float, *, drain: float = 0.0, until: Event | None = None
    ) -> None:
        """`stop`'s policy: with `drain`, first wait up to that many seconds until the
        executor works on no request (`wait_idle`); wait out the window after readiness in
        which a SIGTERM is lost (`policy.SETTLE`); then one SIGTERM and SIGKILL after
        `timeout`. The exit is awaited on `until` (default: the instance's end, its tree
        gone)."""
        gone = self._gone if until is None else until

        async def gone_within(seconds: float) -> bool:
            return await set_within(self._loop, seconds, gone)

        if drain > 0 and not self.has_exited():
            await self._drain(drain)
        settle = policy.settle_left(self.ready_at, self._loop.now())
        if not self.has_exited() and settle > 0:
            await gone_within(settle)
        if not self.has_exited():
            self._life.stop_requested()
            steps = policy.stop_steps(timeout, sent=self._life.sent)
            await run_stop(steps, self.send_signal, gone_within)

    async def kill_sequence(self) -> None:
        """SIGKILL now, and wait for the end (a launch that failed or was cancelled: no
        grace, the executor never served anyone)."""
        self._life.stop_requested()

        async def gone_within(seconds: float) -> bool:
            return await set_within(self._loop, seconds, self._gone)

        await run_stop(policy.stop_steps(0), self.send_signal, gone_within)

    async def deliver_stop(self) -> None:
        """The graceful stop of an owner that goes away: one SIGTERM, SIGKILL after
        `stop_timeout`; the caller cancels it once the exit comes."""

        async def never(seconds: float) -> bool:
            await self._loop.sleep(seconds)
            return False

        await run_stop(policy.stop_steps(self.stop_timeout), self.send_signal, never)

    async def reap(self, returncode: int) -> None:
        """Once the leader has exited (with `returncode`, told to `when_exited`'s callers
        first): wait until no process of its tree is left, by the
        same policy as the leader, SIGKILL included (a process stuck in D state is given up
        after `policy.GROUP_KILL_WAIT`); then let the output drain, at most `PIPE_DRAIN` (a
        process that escaped the tree may hold the pipe for ever). The caller shields this
        from its own cancellation, then records the exit (`record_exit`)."""
        life = self._life
        life.leader_exited(returncode)
        calls, self._exit_calls = self._exit_calls, []
        for fn in calls:
            fn(ExitReason(returncode=returncode, requested=life.requested))
        tree, loop = self.tree, self._loop
        if tree.alive():
            steps = policy.stop_steps(
                self.stop_timeout, sent=self._life.sent, kill_wait=policy.GROUP_KILL_WAIT
            )

            async def tree_gone_within(seconds: float) -> bool:
                return await loop.within(seconds, tree_gone(tree, loop)) is not None

            await run_stop(steps, self.send_signal, tree_gone_within)
        tree.release()
        await self.output_ended_within(PIPE_DRAIN)
        self._lines.stop_reading()

    def record_exit(self, returncode: int) -> ExitReason:
        """The leader exited with `returncode` and its tree is gone: the instance's end."""
        life = self._life
        life.exited(returncode)
        self._reason = ExitReason(returncode=returncode, requested=life.requested)
        self._gone.set()
        self._on_exit()
        return self._reason

    async def wait_idle(self, polled: Callable[[int | None], None] = lambda busy: None) -> None:
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
            slots = await get_json(
                self._loop, connect_host(r.host), r.port, path, key=r.api_key, timeout=1.0
            )
            busy = None if slots is None else busy_slots(slots, profile.slot_busy_field)
            polled(busy)
            if not busy:
                return
            await self._loop.sleep(DRAIN_POLL)

    async def _drain(self, seconds: float) -> None:
        """`wait_idle` for up to `seconds`, saying (`notice`) how many slots are busy when it
        begins and how long it waited when it ends: a draining stop is otherwise silent."""
        loop = self._loop
        start = loop.now()
        seen: list[int | None] = []

        def polled(busy: int | None) -> None:
            if not seen and busy:
                notice.say(f"draining: {_slots(busy)} busy; waiting up to {seconds:g} s")
            seen.append(busy)

        async def idle() -> bool:
            await self.wait_idle(polled)
            return True

        done = await loop.within(seconds, idle())
        notice.say(_drained(seen, done is not None, loop.now() - start, seconds))

    def __repr__(self) -> str:
        reason = self.exit_reason
        state = "running" if reason is None else reason.describe()
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
