"""The trio adapter: start an executor, stream its logs, wait until it is ready, stop it.

Policies, each chosen so that nothing is left behind:

- The child runs in its own session and process group, and the kernel sends it SIGKILL if
  the thread that started it dies (``PR_SET_PDEATHSIG``, set by util-linux's ``setpriv``
  where present, else by a pre-exec hook), so ``kill -9`` of the caller leaves no executor
  holding memory or a port.
- Only the plan decides the endpoint: host, port and key are read back from its args and
  env, and variables the executor reads that the plan does not set are removed from the
  inherited environment (a stray ``LLAMA_ARG_PORT`` cannot move the server; the profile's
  ``env_prefix`` and flag table say which variables an executor reads).
- Readiness polls the plan's ready path on loopback every 0.5 ms at first, backing off to
  every 5 ms, and at once whenever the executor logs a line. Connection refused, 503 and
  timeouts mean "not yet"; the process exiting means `NotReady`, with its exit status and
  last log lines. If the launch fails or is cancelled the child is killed first.
- A scanned port that another process took between planning and binding is re-planned to
  the next free port, a bounded number of times; an explicit port is never moved.
- `Instance.stop` sends SIGTERM to the group, then SIGKILL when the timeout expires; it is
  shielded from the caller's cancellation and returns when the exit is observed (pidfd), not
  on a polling tick.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import io
import math
import os
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import IO, Any, Final, Protocol

import trio
from returns.result import Failure, Result, Success

from exedra_engine._core import readiness
from exedra_engine._core.endpoint import Resolved, env_dict, resolve
from exedra_engine._core.executors import executor_profile
from exedra_engine._core.kinds import Kind
from exedra_engine._core.planner import next_free_port, with_port
from exedra_engine._core.redact import TextRedactor, plan_secrets, refuse_redacted
from exedra_engine._core.struct import Value
from exedra_engine._core.values import Endpoint, LaunchPlan, connect_host
from exedra_engine._shell.host import LocalHost
from exedra_engine._shell.plan import read_ports_in_use
from exedra_engine._trio import spawn
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.errors import EngineError, LaunchError, NotReady

PORT_RETRIES: Final = 3
"""How many times a scanned port lost to another process is re-planned."""
TAIL_LINES: Final = 20
_MAX_LINE: Final = 1 << 16
_LOG_QUEUE: Final = 4096
_POLL_FIRST: Final = 0.0005
_POLL_MAX: Final = 0.005
_PROBE_TIMEOUT: Final = 1.0
_PR_SET_PDEATHSIG: Final = 1
# llama-server installs its SIGTERM handler after /health turns 200 and arms its main loop
# just after that; a SIGTERM in between is lost (the loop starts anyway) and the executor
# then runs until SIGKILL. A stop that comes this soon after readiness waits out the window.
_SETTLE: Final = 0.05

Logs = IO[str] | IO[bytes] | trio.abc.SendStream | None


class ExitReason(Value, frozen=True, kw_only=True):
    """How an executor process ended."""

    returncode: int
    """The exit status, or minus the signal number that ended it (as `subprocess`)."""
    requested: bool
    """Whether `stop` had been called before it ended."""

    @property
    def signal(self) -> int | None:
        """The signal that ended the process, if one did."""
        return -self.returncode if self.returncode < 0 else None

    @property
    def clean(self) -> bool:
        """Exit 0, or death by the SIGTERM of our own `stop`. A SIGKILL at the stop deadline
        is not clean: the executor ignored the request to stop."""
        return self.returncode == 0 or (self.requested and self.signal == signal.SIGTERM)

    def describe(self) -> str:
        """``exit 1``, ``killed by SIGKILL`` and so on, for people."""
        sig = self.signal
        how = f"killed by {signal.Signals(sig).name}" if sig else f"exit {self.returncode}"
        return how + (" after stop()" if self.requested else "")


@functools.cache
def _setpriv() -> str | None:
    """util-linux's setpriv, if it can set the parent-death signal."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        out = subprocess.run(
            [path, "--help"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return path if "--pdeathsig" in out else None


def _death_signal() -> tuple[list[str], Callable[[], None] | None]:
    """How the child gets SIGKILL when its parent dies: an argv prefix, or a pre-exec hook.

    setpriv sets PR_SET_PDEATHSIG in the child and execs the executor, so the spawn can use
    vfork: 0.2 ms instead of a full fork of this (large) process for a Python pre-exec hook,
    ~5 ms here. Its one gap: a parent that dies in the sub-millisecond between fork and
    setpriv's prctl is not noticed, which the pre-exec hook (used when setpriv is missing)
    checks for.
    """
    path = _setpriv()
    if path is not None:
        return [path, "--pdeathsig", "KILL", "--"], None
    return [], _child_setup(os.getpid())


def _child_setup(parent: int) -> Callable[[], None]:
    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        # Runs in the child between fork and exec: only async-signal-safe work here.
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return setup


def child_environment(plan: LaunchPlan, base: dict[str, str] | None = None) -> dict[str, str]:
    """The executor's environment: `base` (default: ours) without the variables the
    executor reads that the plan does not set, plus the plan's env."""
    env = dict(os.environ if base is None else base)
    planned = env_dict(plan.env)
    profile = executor_profile(plan.spec.kind)
    read = profile.flags.env_names | {profile.key_env} - {""}
    prefix = profile.env_prefix
    for name in list(env):
        if name not in planned and (name in read or (prefix and name.startswith(prefix))):
            del env[name]
    env.update(planned)
    return env


class _LogPump:
    """Reads the child's output, keeps the last lines, and forwards lines to `logs` without
    ever making the child wait: when the consumer is slow, lines are dropped and counted."""

    def __init__(self, logs: Logs, secrets: tuple[str, ...]) -> None:
        self.logs = logs
        self.redactor = TextRedactor(secrets)
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.dropped = 0
        self.line_seen = trio.Event()
        self._send, self._recv = trio.open_memory_channel[bytes](_LOG_QUEUE)

    async def read(self, stream: trio.abc.ReceiveStream) -> None:
        buf = b""
        async with self._send:
            while True:
                try:
                    chunk = await stream.receive_some(_MAX_LINE)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    chunk = b""
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                if len(buf) > _MAX_LINE:
                    lines.append(buf)
                    buf = b""
                for line in lines:
                    self._line(line + b"\n")
            if buf:
                self._line(buf + b"\n")

    @classmethod
    def for_plan(cls, logs: Logs, plan: LaunchPlan, resolved: Resolved) -> _LogPump:
        """The pump for `plan`'s executor: every secret it is handed is hidden in its lines,
        not only the API keys (a log line may quote HF_TOKEN or --hf-token too)."""
        return cls(logs, (*resolved.api_keys, *plan_secrets(plan.args, plan.env)))

    def _line(self, raw: bytes) -> None:
        line = self.redactor.bytes(raw)
        self.tail.append(line.decode("utf-8", errors="replace").rstrip("\n"))
        self.line_seen.set()
        if self.logs is None:
            return
        try:
            self._send.send_nowait(line)
        except trio.WouldBlock:
            self.dropped += 1

    async def write(self) -> None:
        logs = self.logs
        if logs is None:
            async with self._recv:
                async for _ in self._recv:
                    pass
            return
        async with self._recv:
            while True:
                try:
                    batch = [await self._recv.receive()]
                except trio.EndOfChannel:
                    return
                while True:
                    try:
                        batch.append(self._recv.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                data = b"".join(batch)
                try:
                    await _write(logs, data)
                except (OSError, ValueError, trio.BrokenResourceError, trio.ClosedResourceError):
                    self.logs = None  # a closed log sink must not take the executor down

    def new_line_event(self) -> trio.Event:
        if self.line_seen.is_set():
            self.line_seen = trio.Event()
        return self.line_seen


async def _write(logs: Any, data: bytes) -> None:
    if isinstance(logs, trio.abc.SendStream):
        await logs.send_all(data)
    elif isinstance(logs, io.TextIOBase) or hasattr(logs, "encoding"):
        text = data.decode("utf-8", errors="replace")
        await trio.to_thread.run_sync(_sync_write, logs, text)
    else:
        await trio.to_thread.run_sync(_sync_write, logs, data)


def _sync_write(logs: Any, data: str | bytes) -> None:
    logs.write(data)
    logs.flush()


class Instance:
    """One running executor process. Create it with `launch` or `open_instance`."""

    def __init__(
        self, plan: LaunchPlan, resolved: Resolved, process: spawn.Child, pump: _LogPump
    ) -> None:
        self._plan = plan
        self._resolved = resolved
        self._process = process
        self._pump = pump
        self._exited = trio.Event()
        self._stop_requested = False
        self._exit: ExitReason | None = None
        self.started_at = trio.current_time()
        self.ready_at: float | None = None
        self.ready_connections = 0
        """TCP connections the readiness poll opened (one, unless the executor closed it)."""
        self.stop_timeout = STOP_TIMEOUT
        """The grace period used when the owning nursery is cancelled under a running child."""

    @property
    def endpoint(self) -> Endpoint:
        """The instance's address and API key."""
        return Endpoint(url=self._resolved.url, api_key=self._resolved.api_key)

    @property
    def pid(self) -> int:
        """The executor's process id (also its process group id)."""
        return self._process.pid

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
        """The last lines the executor wrote (API keys redacted)."""
        return tuple(self._pump.tail)

    @property
    def dropped_log_lines(self) -> int:
        """Lines not forwarded to `logs` because the consumer fell behind."""
        return self._pump.dropped

    async def wait(self) -> None:
        """Return when the process has exited."""
        await self._exited.wait()

    async def stop(self, timeout: float = STOP_TIMEOUT) -> ExitReason:
        """SIGTERM to the process group, SIGKILL if it is still running after `timeout`
        seconds. Idempotent, safe after the process died, and it completes even while the
        caller's scope is being cancelled."""
        with trio.CancelScope(shield=True):
            if not self._exited.is_set() and self.ready_at is not None:
                settle = self.ready_at + _SETTLE - trio.current_time()
                if settle > 0:
                    with trio.move_on_after(settle):
                        await self._exited.wait()
            if not self._exited.is_set():
                self._stop_requested = True
                await terminate(self._signal, self._exited.wait, timeout)
        assert self._exit is not None
        return self._exit

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, sig)

    async def _watch(self) -> None:
        try:
            await self._process.wait()
        finally:
            if self._process.returncode is None:
                # Cancelled while the child runs (the caller's nursery is going away): the
                # child must not outlive it, and gets the same graceful stop as stop().
                self._stop_requested = True
                await terminate(self._signal, self._process.wait, self.stop_timeout)
            await self._reap_group()
            code = self._process.returncode
            assert code is not None
            self._exit = ExitReason(returncode=code, requested=self._stop_requested)
            self._exited.set()

    async def _reap_group(self) -> None:
        """Wait until no process of the executor's group is left (a forked helper can outlive
        the leader by a millisecond or for ever), by the same policy as the leader."""
        pgid = self._process.pid
        if _group_alive(pgid):
            # Once the leader is gone: a process stuck in D state, or a zombie nobody reaps,
            # must not hold the stop for ever; a second after SIGKILL the wait gives up.
            await terminate(
                self._signal,
                functools.partial(_group_gone, pgid),
                self.stop_timeout,
                term=not self._stop_requested,
                kill_wait=1.0,
            )

    def __repr__(self) -> str:
        state = "running" if self._exit is None else self._exit.describe()
        return f"<Instance pid={self.pid} {self.endpoint.url} {state}>"


class PortsReader(Protocol):
    """Which ports an executor of `kind` could not bind now (`exedra_engine._shell.plan`)."""

    def __call__(self, kind: Kind, /) -> frozenset[int]: ...


def _local_ports(kind: Kind) -> frozenset[int]:
    return read_ports_in_use(LocalHost(), kind)


async def launch(
    nursery: trio.Nursery,
    plan: LaunchPlan,
    logs: Logs = None,
    *,
    ready_timeout: float = math.inf,
    ports: PortsReader = _local_ports,
) -> Result[Instance, EngineError]:
    """Start the plan's executor in `nursery` and wait until its ready path answers 200.

    The endpoint is read back from the plan's args and env. `logs` receives the executor's
    stdout and stderr line by line (a text or binary file, or a trio stream). The wait is
    bounded by `ready_timeout` and by the caller's deadlines; on failure, timeout or
    cancellation the child is killed before this returns or raises. The instance is
    supervised by one task in `nursery` (started with ``nursery.start``): when the nursery
    is cancelled the child is stopped. `ports` says which ports are taken when a scanned
    port was lost to another process between planning and binding.
    """
    try:
        inst = await start_instance(nursery, plan, logs, ready_timeout=ready_timeout, ports=ports)
    except EngineError as e:
        return Failure(e)
    return Success(inst)


async def start_instance(
    nursery: trio.Nursery,
    plan: LaunchPlan,
    logs: Logs = None,
    *,
    ready_timeout: float = math.inf,
    ports: PortsReader = _local_ports,
) -> Instance:
    """`launch` for the library's own callers (the command line): raises the launch's
    `EngineError` instead of returning it."""
    inst: Instance = await nursery.start(_supervise, plan, logs, ready_timeout, ports)
    return inst


async def _supervise(
    plan: LaunchPlan,
    logs: Logs,
    ready_timeout: float,
    ports: PortsReader,
    *,
    task_status: trio.TaskStatus[Instance] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Start, wait for readiness, report the instance with ``started()``, then own the
    process until it exits. A failure before ``started()`` is raised, so ``start()``
    raises it; a lost scanned port is re-planned a bounded number of times."""
    attempt = plan
    for _ in range(PORT_RETRIES + 1):
        failed = await _attempt(attempt, logs, ready_timeout, task_status)
        if failed is None:
            return
        if not (attempt.port_scanned and failed.lost_port):
            raise failed
        in_use = ports(attempt.spec.kind)
        nxt = next_free_port(attempt.port + 1, in_use)
        if attempt.port not in in_use or nxt is None:
            raise failed
        attempt = with_port(attempt, nxt)
    assert failed is not None
    raise failed


class _NotReadyDetail(NotReady):
    def __init__(self, message: str, *, lost_port: bool = False) -> None:
        super().__init__(message)
        self.lost_port = lost_port


async def _attempt(
    plan: LaunchPlan, logs: Logs, ready_timeout: float, task_status: trio.TaskStatus[Instance]
) -> _NotReadyDetail | None:
    """One start. None once the process has run and exited after ``started()``; the
    readiness failure when it never got there (the child is dead by then)."""
    refuse_redacted(plan)
    r = resolve(plan.spec.kind, plan.args, plan.env)
    pump = _LogPump.for_plan(logs, plan, r)
    # Checked here because with a setpriv prefix a missing binary would only show as
    # setpriv's own exit status.
    if shutil.which(plan.command) is None:
        raise LaunchError(f"{plan.command}: cannot start: not an executable file")
    prefix, setup = _death_signal()
    try:
        process = await spawn.start(
            [*prefix, plan.command, *plan.args], child_environment(plan), setup
        )
    except OSError as e:
        raise LaunchError(f"{plan.command}: cannot start: {e.strerror or e}") from None
    inst = Instance(plan, r, process, pump)
    assert process.stdout is not None
    failed: _NotReadyDetail | None = None
    # The body's failures are kept and raised after the nursery: raised inside it, trio
    # would wrap them in an ExceptionGroup the caller did not ask for.
    async with trio.open_nursery() as tasks:
        tasks.start_soon(inst._watch)
        tasks.start_soon(_pump_then_close, pump, process.stdout)
        tasks.start_soon(pump.write)
        try:
            failed = await _until_ready(inst, r, ready_timeout)
        except BaseException:
            await _abort(inst)  # cancelled while waiting: the child goes first
            raise
        if failed is not None:
            await _abort(inst)
        else:
            inst.ready_at = trio.current_time()
            task_status.started(inst)
    return failed


async def _pump_then_close(pump: _LogPump, stdout: trio.abc.ReceiveStream) -> None:
    try:
        await pump.read(stdout)
    finally:
        await stdout.aclose()


async def _abort(inst: Instance) -> None:
    # A launch that failed or was cancelled: no grace, the executor never served anyone.
    inst._stop_requested = True
    await terminate(inst._signal, inst._exited.wait, 0)


async def _until_ready(inst: Instance, r: Resolved, timeout: float) -> _NotReadyDetail | None:
    path = inst.plan.ready
    poller = _Poller(connect_host(r.host), r.port, path)
    try:
        return await _poll(inst, r, timeout, poller)
    finally:
        inst.ready_connections = poller.connections
        await poller.close()


async def _poll(
    inst: Instance, r: Resolved, timeout: float, poller: _Poller
) -> _NotReadyDetail | None:
    path = inst.plan.ready
    with trio.move_on_after(timeout) as scope:
        interval = _POLL_FIRST
        while True:
            if inst._exited.is_set():
                return _exited_early(inst)
            if await poller.ready():
                if _answered_by(inst, r.port):
                    return None
                # Another process answered on our port: ours lost the bind, or has not bound
                # yet. Its exit, or its own answer, decides.
                await poller.close()
            seen = inst._pump.new_line_event()
            with trio.move_on_after(interval):
                async with trio.open_nursery() as wake:
                    # Whichever comes first: the interval, a new log line, the exit.
                    async def wait_for(ev: trio.Event) -> None:
                        await ev.wait()
                        wake.cancel_scope.cancel()

                    wake.start_soon(wait_for, seen)
                    wake.start_soon(wait_for, inst._exited)
            interval = min(interval * 1.25, _POLL_MAX)
    assert scope.cancelled_caught
    tail = "\n".join(inst.log_tail[-5:])
    return _NotReadyDetail(
        f"{inst.plan.command} did not answer {path} on {r.url} within {timeout:g} s"
        + (f"; last log lines:\n{tail}" if tail else "")
    )


async def terminate(
    send: Callable[[int], None],
    exited: Callable[[], Awaitable[object]],
    grace: float,
    *,
    term: bool = True,
    kill_wait: float = math.inf,
) -> None:
    """The one stop policy (trio's ``deliver_cancel`` idea), shielded from cancellation:
    SIGTERM, wait up to `grace` seconds for `exited`, then SIGKILL and wait up to
    `kill_wait`. `term` off skips straight to the grace wait (SIGTERM already sent)."""
    with trio.CancelScope(shield=True):
        if grace > 0:
            if term:
                send(signal.SIGTERM)
            with trio.move_on_after(grace) as waited:
                await exited()
            if not waited.cancelled_caught:
                return
        send(signal.SIGKILL)
        with trio.move_on_after(kill_wait):
            await exited()


async def _group_gone(pgid: int) -> None:
    delay = 0.0005
    while _group_alive(pgid):
        await trio.sleep(delay)
        delay = min(delay * 2, 0.02)


def _answered_by(inst: Instance, port: int) -> bool:
    """Whether the socket listening on `port` is the executor's own (a 200 from a stranger
    that took the port must not make a launch ready). True when the kernel cannot tell."""
    host = LocalHost()
    listening = host.listener_inodes(port)
    if not listening:  # the kernel cannot be asked (or the listener just went): trust the 200
        return True
    held = host.socket_inodes(inst.pid)
    if held is None:
        # No descriptors to list: the executor has exited (a zombie has none), or /proc hides
        # them. Only a live process whose descriptors are hidden is given the benefit.
        stat = host.read_text(f"/proc/{inst.pid}/stat") or ""
        state = stat.rpartition(")")[2].split()[:1]
        return bool(state) and state[0] not in ("Z", "X")
    return not listening.isdisjoint(held)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_SIGILL_HINT = (
    ": this binary was built for CPU instructions this machine lacks; rebuild it with "
    "ggml's runtime CPU dispatch (GGML_BACKEND_DL=ON, GGML_CPU_ALL_VARIANTS=ON), as "
    "scripts/install-executors.sh does"
)


def _exited_early(inst: Instance) -> _NotReadyDetail:
    reason = inst.exit_reason
    assert reason is not None
    hint = _SIGILL_HINT if reason.signal == signal.SIGILL else ""
    tail = "\n".join(inst.log_tail[-8:])
    # Whether another process took the port is decided by the caller from the ports in use,
    # not from the executor's wording.
    return _NotReadyDetail(
        f"{inst.plan.command} exited before it was ready ({reason.describe()}){hint}"
        + (f"; last log lines:\n{tail}" if tail else ""),
        lost_port=True,
    )


class _Poller:
    """Asks the ready path on one keep-alive connection, reconnecting only when the
    executor refused or closed it (`readiness` holds the bytes of it)."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self.host = host
        self.port = port
        self.request = readiness.request(host, port, path)
        self.stream: trio.SocketStream | None = None
        self.buf = b""
        self.connections = 0

    async def ready(self) -> bool:
        """One poll: True on 200; refused, 503, a timeout or a reset are "not yet"."""
        with trio.move_on_after(_PROBE_TIMEOUT):
            try:
                return await self._ask()
            except (
                OSError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                readiness.Malformed,
            ):
                await self.close()
                return False
        await self.close()  # a half-read answer is lost with its connection
        return False

    async def _ask(self) -> bool:
        if self.stream is None:
            self.stream = await trio.open_tcp_stream(self.host, self.port)
            # Refused attempts leave no socket behind; established ones end in TIME_WAIT.
            self.connections += 1
            self.buf = b""
        await self.stream.send_all(self.request)
        while True:
            answer = readiness.parse(self.buf)
            if answer is not None:
                self.buf = self.buf[answer.consumed :]
                # llama-server marks every 503 while loading "Connection: close" but keeps
                # answering on the socket (checked with the binary); closing on the header
                # would cost a connection per poll, ~300 for a 5 s load. So the connection is
                # dropped only when the executor really closes it, or the answer was unframed.
                if not answer.framed:
                    await self.close()
                return answer.status == 200
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise trio.BrokenResourceError("closed by the executor")
            self.buf += chunk

    async def close(self) -> None:
        if self.stream is not None:
            stream, self.stream = self.stream, None
            with trio.CancelScope(shield=True):
                await stream.aclose()


@asynccontextmanager
async def open_instance(
    plan: LaunchPlan,
    logs: Logs = None,
    *,
    ready_timeout: float = math.inf,
    stop_timeout: float = STOP_TIMEOUT,
) -> AsyncIterator[Instance]:
    """``async with open_instance(plan) as inst:`` — ready on entry, stopped on exit, also on
    error or cancellation. Raises the launch's `EngineError` if it cannot start."""
    # The body's exception is carried out of the nursery and raised as itself: raised inside
    # it, trio would wrap it in an ExceptionGroup the caller did not ask for.
    raised: BaseException | None = None
    async with trio.open_nursery() as nursery:
        try:
            inst: Instance = await nursery.start(
                _supervise, plan, logs, ready_timeout, _local_ports
            )
        except EngineError as e:
            raised = e
        else:
            inst.stop_timeout = stop_timeout
            try:
                yield inst
            except BaseException as e:
                raised = e
            finally:
                await inst.stop(stop_timeout)
    if raised is not None:
        raise raised
