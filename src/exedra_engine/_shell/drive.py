"""A launch's loops, written once for every event loop. No I/O of their own.

Each function is plain ``async`` code that awaits only the primitives an adapter hands it
(a poll, a wait for news or for the exit, a clock), so trio and asyncio run the very same
readiness loop, stop sequence and port re-planning; an adapter supplies the primitives and
its own shielding from cancellation. What the loops decide comes from the pure core:
`exedra_engine._core.launch.readiness` (the request, the intervals, the deadlines) and
`exedra_engine._core.launch.stop` (the steps).
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.launch import diagnosis, readiness
from exedra_engine._core.launch.actual import Actual, actual
from exedra_engine._core.launch.readiness import LoadLimits, field_at, prefix_of
from exedra_engine._core.launch.stop import Send, Step
from exedra_engine._core.plan.endpoint import resolve
from exedra_engine._core.plan.layers import Source
from exedra_engine._core.plan.ports import next_free_port, with_port
from exedra_engine._core.redact import refuse_redacted
from exedra_engine._core.values import LaunchPlan, connect_host
from exedra_engine._shell.child import group_alive, group_peak_rss, signal_name
from exedra_engine._shell.flag_tables import suggest_flag
from exedra_engine._shell.host import LocalHost
from exedra_engine._shell.plan import read_ports_in_use
from exedra_engine._shell.ports import ProcessSockets
from exedra_engine.errors import AddressUnavailable, LaunchError, NotReady

if TYPE_CHECKING:
    from exedra_engine._shell.instance import InstanceState

Outcome = Literal["ready", "exited", "timeout", "stalled"]
L = TypeVar("L")
T = TypeVar("T")

PORT_RETRIES = 3
"""How many times a scanned port lost to another process is re-planned."""


PortsReader = Callable[[str], frozenset[int]]
"""Which ports an executor of a kind could not bind now (`exedra_engine._shell.plan`)."""


def local_ports(kind: str, *, executors: Executors = BUILTIN) -> frozenset[int]:
    """The ports an executor of `kind` could not bind on this host now."""
    return read_ports_in_use(LocalHost(), kind, executors=executors)


@dataclasses.dataclass(frozen=True)
class LaunchOptions(Generic[L]):
    """What one launch is given besides the plan (kept together through the retries);
    `logs` is the adapter's kind of sink."""

    logs: L
    limits: LoadLimits
    stop_timeout: float
    ports: PortsReader
    sockets: ProcessSockets
    sources: tuple[Source, ...] = ()
    """The plan's provenance (`explain_launch`): which layer set a refused flag."""
    executors: Executors = BUILTIN
    """The executors the plan's kind is looked up in."""

    def __post_init__(self) -> None:
        if self.ports is local_ports:  # the default reader must know the plan's kind
            object.__setattr__(
                self, "ports", functools.partial(local_ports, executors=self.executors)
            )


class Probe(Protocol):
    """One adapter's ask of the ready path (on a kept-alive connection)."""

    port: int

    async def ready(self) -> bool:
        """One poll: True on 200; refused, 503, a timeout or a reset are "not yet"."""
        ...

    async def close(self) -> None:
        """Drop the connection (the next poll opens another)."""
        ...


class News(Protocol):
    """What the poll waits on between asks: a log line or the exit cuts the wait short."""

    @property
    def last_output(self) -> float:
        """When the executor last wrote something, on the adapter's clock."""
        ...

    async def wait(self, timeout: float) -> None:
        """Until news or `timeout`; news that came before the call counts."""
        ...


class Connection(Protocol):
    """A TCP connection as an adapter gives it (a trio ``SocketStream`` is one)."""

    async def send_all(self, data: bytes) -> None: ...

    async def receive_some(self, max_bytes: int) -> bytes:
        """Up to `max_bytes`; b"" once the peer has closed."""
        ...

    async def aclose(self) -> None: ...


class Loop(Protocol):
    """An adapter's primitives, all the loops here need of its event loop."""

    errors: tuple[type[BaseException], ...]
    """What its connections raise when the peer goes away (beyond `OSError`)."""

    def now(self) -> float:
        """Its clock, in seconds."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    async def within(self, seconds: float, aw: Awaitable[T]) -> T | None:
        """`aw`'s result, or None when `seconds` passed first (`aw` is then cancelled)."""
        ...

    async def connect(self, host: str, port: int) -> Connection:
        """A TCP connection; raises `OSError` when refused."""
        ...

    async def in_thread(self, fn: Callable[[], T]) -> T:
        """`fn()` on a worker thread, so a blocking call never sits on the loop."""
        ...


async def _exchange(conn: Connection, request: bytes, buf: bytes) -> tuple[readiness.Answer, bytes]:
    """Send `request` and read one whole answer; the answer and the buffer it stands at the
    front of (`buf`: what the connection had left over)."""
    await conn.send_all(request)
    while (answer := readiness.parse(buf)) is None:
        chunk = await conn.receive_some(65536)
        if not chunk:
            raise ConnectionResetError("closed by the executor")
        buf += chunk
    return answer, buf


class ReadyProbe:
    """Asks the ready path on one keep-alive connection (`readiness` holds its bytes),
    reconnecting only when the executor refused or closed it."""

    def __init__(self, host: str, port: int, path: str, loop: Loop) -> None:
        self.host = host
        self.port = port
        self.request = readiness.request(host, port, path)
        self.connections = 0
        self._loop = loop
        self._errors: tuple[type[BaseException], ...] = (
            *loop.errors,
            OSError,
            readiness.Malformed,
        )
        self._conn: Connection | None = None
        self._buf = b""

    async def ready(self) -> bool:
        """One poll: True on 200; refused, 503, a timeout or a reset are "not yet"."""
        try:
            answered = await self._loop.within(readiness.PROBE_TIMEOUT, self._ask())
        except self._errors:
            answered = None
        if answered is None:
            await self.close()  # a half-read answer is lost with its connection
        return bool(answered)

    async def _ask(self) -> bool:
        if self._conn is None:
            self._conn = await self._loop.connect(self.host, self.port)
            # Refused attempts leave no socket behind; established ones end in TIME_WAIT.
            self.connections += 1
            self._buf = b""
        answer, buf = await _exchange(self._conn, self.request, self._buf)
        self._buf = buf[answer.consumed :]
        # llama-server marks every 503 while loading "Connection: close" but keeps
        # answering on the socket (checked with the binary); closing on the header would
        # cost a connection per poll, ~300 for a 5 s load. So the connection is dropped
        # only when the executor really closes it, or the answer was unframed.
        if not answer.framed:
            await self.close()
        return answer.status == 200

    async def close(self) -> None:
        """Drop the connection (the next poll opens another)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.aclose()


async def get_json(
    loop: Loop, host: str, port: int, path: str, *, key: str, timeout: float
) -> object:
    """One GET of `path` on its own connection, its body decoded as JSON; None on any
    failure (refused, not 200, not JSON, slower than `timeout`)."""
    errors: tuple[type[BaseException], ...] = (*loop.errors, OSError, readiness.Malformed)

    async def ask() -> object:
        conn = await loop.connect(host, port)
        try:
            answer, buf = await _exchange(conn, readiness.request(host, port, path, key), b"")
        finally:
            await conn.aclose()
        return readiness.json_body(buf, answer) if answer.status == 200 else None

    try:
        return await loop.within(timeout, ask())
    except errors:
        return None


ACTUAL_WAIT = 2.0
"""How long the executor may take to say what it runs with, once ready."""


async def read_actual(inst: InstanceState, loop: Loop) -> Actual:
    """What the executor really did: its context (asked), its group's peak memory (/proc)."""
    plan, r = inst.plan, inst.resolved
    profile = inst.profile
    ctx = None
    if profile.props_path:
        path = prefix_of(plan.ready, profile.ready_path) + profile.props_path
        props = await get_json(
            loop, connect_host(r.host), r.port, path, key=r.api_key, timeout=ACTUAL_WAIT
        )
        ctx = field_at(props, profile.props_ctx)
    peak = await loop.in_thread(functools.partial(group_peak_rss, inst.pid))
    return actual(plan, profile, ctx, peak)


async def until_ready(
    probe: Probe,
    news: News,
    *,
    exited: Callable[[], bool],
    now: Callable[[], float],
    limits: LoadLimits,
    sockets: ProcessSockets,
    pid: int,
) -> Outcome:
    """Poll until the ready path answers 200 from process `pid`, the process exits, or a
    limit of `limits` passes (counted from now). The poll is asked every
    `readiness.POLL_FIRST` s at first, backing off to `readiness.POLL_MAX`, and at once on
    news."""
    started = now()
    interval = readiness.POLL_FIRST
    while True:
        if exited():
            return "exited"
        if await probe.ready():
            if owns_port(sockets, pid, probe.port):
                return "ready"
            # Another process answered on our port: ours lost the bind, or has not bound
            # yet. Its exit, or its own answer, decides.
            await probe.close()
        t = now()
        overdue = limits.overdue(started, news.last_output, t)
        if overdue is not None:
            return overdue
        await news.wait(min(interval, limits.left(started, news.last_output, t)))
        interval = readiness.next_interval(interval)


async def await_ready(
    inst: InstanceState,
    probe: ReadyProbe,
    news: News,
    opts: LaunchOptions[Any],
    loop: Loop,
    *,
    kill: Callable[[], Awaitable[object]],
) -> Outcome:
    """One start's wait (`until_ready`, within ``opts.limits``): "ready" once `inst` is
    ready (its ``ready_at`` and ``actual`` set); else why not, once `kill` has killed it. A
    cancellation meanwhile kills it too, then propagates."""
    limits, sockets, now = opts.limits, opts.sockets, loop.now
    try:
        outcome = await until_ready(
            probe,
            news,
            exited=inst.has_exited,
            now=now,
            limits=limits,
            sockets=sockets,
            pid=inst.pid,
        )
    except BaseException:
        await kill()  # cancelled while waiting: the child goes first
        raise
    finally:
        inst.ready_connections = probe.connections
        await probe.close()
    if outcome == "ready":
        inst.ready_at = now()
        inst.actual = await read_actual(inst, loop)
    else:
        await kill()
    return outcome


def before_start(plan: LaunchPlan, executors: Executors = BUILTIN) -> None:
    """What every adapter checks before it starts anything: a plan that carries the
    redaction marker is refused (`refuse_redacted`), and a command that is not an
    executable raises `LaunchError` (with a setpriv prefix it would only show as setpriv's
    own exit status)."""
    refuse_redacted(plan, executors=executors)
    if shutil.which(plan.command) is None:
        raise LaunchError(f"{plan.command}: cannot start: not an executable file")


def cannot_start(plan: LaunchPlan, e: OSError) -> LaunchError:
    """The error for a fork or exec that failed."""
    return LaunchError(f"{plan.command}: cannot start: {e.strerror or e}")


def owns_port(sockets: ProcessSockets, pid: int, port: int) -> bool:
    """Whether the socket listening on `port` is process `pid`'s (see
    `readiness.answered_by_executor`)."""
    listening = sockets.listener_inodes(port)
    held = sockets.socket_inodes(pid) if listening else None
    state = ""
    if held is None and listening:
        state = readiness.proc_state(sockets.read_text(f"/proc/{pid}/stat") or "")
    return readiness.answered_by_executor(listening, held, state)


async def run_stop(
    steps: tuple[Step, ...],
    send: Callable[[str], None],
    exit_within: Callable[[float], Awaitable[bool]],
) -> None:
    """Carry out `steps`: `send` each signal (by name); for each wait, `exit_within(s)`
    says whether the exit came within ``s`` seconds, which ends the sequence. The caller
    shields this from its own cancellation (each adapter has its way)."""
    for step in steps:
        if isinstance(step, Send):
            send(step.signal)
        elif await exit_within(step.seconds):
            return


async def with_port_retries(
    plan: LaunchPlan,
    attempt: Callable[[LaunchPlan], Awaitable[NotReady | None]],
    ports: PortsReader,
    executors: Executors = BUILTIN,
) -> None:
    """Run `attempt` (None: it became ready and has run) and, when a scanned port was lost
    to another process between planning and binding (the executor exited, and the ports in
    use say the port is taken, or the executor said it could not bind), again on the next
    free port, at most
    `PORT_RETRIES` times; an explicit port is never moved. Raises the last failure."""
    for _ in range(PORT_RETRIES):
        failed = await attempt(plan)
        if failed is None:
            return
        # Another process took the port if it holds it now, or if the executor said so (a
        # holder that has let go since is still why this start failed).
        retry = plan.port_scanned and failed.returncode is not None
        in_use = ports(plan.spec.kind) if retry else frozenset()
        lost = plan.port in in_use or (retry and isinstance(failed, AddressUnavailable))
        nxt = next_free_port(plan.port + 1, in_use) if lost else None
        if nxt is None:
            raise failed
        plan = with_port(
            plan, nxt, executors=executors
        )  # raises when the argv cannot take the new port
    failed = await attempt(plan)
    if failed is not None:
        raise failed


async def group_gone(pgid: int, sleep: Callable[[float], Awaitable[object]]) -> None:
    """Return once no process of group `pgid` is left (polled, backing off: a group has no
    pidfd); `sleep` is the adapter's."""
    delay = 0.0005
    while group_alive(pgid):
        await sleep(delay)
        delay = min(delay * 2, 0.02)


LOG_DRAIN = 1.0
"""How long an exit's last lines may take to come through the pipe before it is judged."""


async def not_ready(
    inst: InstanceState,
    outcome: Outcome,
    opts: LaunchOptions[Any],
    loop: Loop,
    *,
    output_ended_within: Callable[[float], Awaitable[bool]],
) -> NotReady:
    """The typed failure of a start that did not become ready (`inst` is dead by now): a
    timeout or stall as it stands, an exit classified by the profile's patterns once the log
    has been read to its end (`output_ended_within`). A refused flag is named with its layer
    (``opts.sources``) and the installed binary's closest flag, looked up on a thread."""
    plan, reason, url = inst.plan, inst.exit_reason, inst.endpoint.url
    if outcome != "exited" or reason is None:
        kind: Literal["timeout", "stalled"] = "stalled" if outcome == "stalled" else "timeout"
        seconds = opts.limits.stall if kind == "stalled" else opts.limits.budget
        return diagnosis.not_answering(
            kind,
            command=plan.command,
            path=plan.ready,
            url=url,
            seconds=seconds,
            log=inst.log_tail,
        )
    await output_ended_within(LOG_DRAIN)
    sig = reason.signal
    r = resolve(plan.spec.kind, plan.args, plan.env, executors=opts.executors)
    ended = diagnosis.Exit(
        command=plan.command,
        returncode=reason.returncode,
        how=reason.describe(),
        signal=signal_name(sig) if sig else "",
        log=inst.log_tail,
        host=r.host,
        port=r.port,
    )
    profile = inst.profile
    # On a worker thread: a refused flag's did-you-mean reads the installed binary's table.
    suggest = functools.partial(suggest_flag, profile, plan.command)
    classify = functools.partial(
        diagnosis.classify, ended, profile, suggest, sources=opts.sources, memory=plan.memory
    )
    return await loop.in_thread(classify)
