"""The asyncio adapter: start an executor, stream its logs, wait until it is ready, stop it.

Native asyncio, no trio underneath. What a launch decides lives once, outside this module,
for every adapter: the child's set-up (`_core.launch.child`, carried out by `_shell.child` on its
one spawner thread, so the parent-death signal outlives any worker thread), log splitting
and redaction (`_core.launch.logs`), the readiness request and deadlines
(`_core.launch.readiness`), the stop sequence (`_core.launch.stop`), and the loops that run
them (`_shell.drive`). This module only
gives those loops asyncio's primitives:

- the exit is awaited on a pidfd registered with the loop (``add_reader``), the output pipe
  is read the same way: no child watcher, no thread per process;
- asyncio has no shielded scope, so the stop runs as its own task and a cancelled caller
  waits for it to finish, then sees its `CancelledError` (`asyncio.timeout` still turns it
  into `TimeoutError`);
- every executor is owned by one supervising task on the running loop: when that task is
  cancelled (the loop shuts down: ``asyncio.run`` cancels every task at its end) the
  executor gets the graceful stop before the task ends.
"""

from __future__ import annotations

import asyncio
import collections
import io
import math
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import IO, Any, Final, TypeVar

from returns.result import Failure, Result, Success

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.launch.budget import load_limits
from exedra_engine._core.launch.child import child_spec
from exedra_engine._core.launch.logs import MAX_LINE, LogLines, log_secrets
from exedra_engine._core.plan.endpoint import Resolved, resolve
from exedra_engine._core.plan.layers import Source
from exedra_engine._core.values import LaunchPlan, connect_host
from exedra_engine._shell import child, drive
from exedra_engine._shell.child import ExitReason
from exedra_engine._shell.host import LocalHost
from exedra_engine._shell.instance import InstanceState
from exedra_engine._shell.ports import ProcessSockets
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.errors import EngineError, NotReady

__all__ = ["ExitReason", "Instance", "Logs", "launch", "open_instance"]

Logs = IO[str] | IO[bytes] | asyncio.StreamWriter | None
"""Where an executor's lines go: a text or binary file, an asyncio stream, or nowhere."""

_LOG_QUEUE: Final = 4096
_PIPE_DRAIN: Final = 1.0
"""How long the output pipe may stay open once the group is gone (a process that left the
group can hold it for ever)."""

T = TypeVar("T")
_OWNED: set[asyncio.Task[None]] = set()
"""The supervising tasks, held here so that the loop's weak references are not the only ones."""


async def _finish(aw: Awaitable[T]) -> tuple[T, bool]:
    """Await `aw` to its end even if the caller is cancelled meanwhile; the result, and
    whether the caller was cancelled (the caller then raises `CancelledError` itself)."""
    task = asyncio.ensure_future(aw)
    cancelled = False
    while True:
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            cancelled = True
            continue
        return task.result(), cancelled


async def _uncancellable(aw: Awaitable[T]) -> T:
    """`aw`'s result, awaited to its end; a cancellation that came meanwhile is raised after."""
    result, cancelled = await _finish(aw)
    if cancelled:
        raise asyncio.CancelledError
    return result


async def _within(fut: asyncio.Future[Any] | asyncio.Event, seconds: float) -> bool:
    """Whether `fut` is done (or the event set) within `seconds`; `fut` is not cancelled."""
    wait = fut.wait() if isinstance(fut, asyncio.Event) else asyncio.shield(fut)
    try:
        async with asyncio.timeout(None if math.isinf(seconds) else seconds):
            await wait
    except TimeoutError:
        return False
    return True


class _News:
    """Set by every source of news (a log line, the exit); the readiness poll waits on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()
        self.last_output = loop.time()

    def output(self) -> None:
        self.last_output = self._loop.time()
        self._event.set()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> None:
        if not self._event.is_set():
            await _within(self._event, timeout)
        self._event.clear()


class _Stream:
    """An asyncio connection as `drive.ReadyProbe` uses it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    @classmethod
    async def connect(cls, host: str, port: int) -> _Stream:
        return cls(*await asyncio.open_connection(host, port))

    async def send_all(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def receive_some(self, max_bytes: int) -> bytes:
        return await self._reader.read(max_bytes)

    async def aclose(self) -> None:
        self._writer.close()  # the socket is closed on the loop's next turn, whatever follows


class _AioLoop:
    """asyncio's primitives for `exedra_engine._shell.drive`'s loops."""

    errors: tuple[type[BaseException], ...] = ()

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def within(self, seconds: float, aw: Awaitable[T]) -> T | None:
        try:
            async with asyncio.timeout(None if math.isinf(seconds) else seconds):
                return await aw
        except TimeoutError:
            return None

    async def connect(self, host: str, port: int) -> _Stream:
        return await _Stream.connect(host, port)

    async def in_thread(self, fn: Callable[[], T]) -> T:
        return await asyncio.to_thread(fn)


LOOP: Final = _AioLoop()


class _Child:
    """A started executor: its exit, seen on a pidfd (polled on kernels without one)."""

    def __init__(self, popen: subprocess.Popen[bytes], loop: asyncio.AbstractEventLoop) -> None:
        self.popen = popen
        self.pid = popen.pid
        self._loop = loop
        self.exited: asyncio.Future[int] = loop.create_future()
        self._pidfd = child.open_pidfd(popen.pid)
        self._tick: asyncio.TimerHandle | None = None
        if self._pidfd is not None:
            loop.add_reader(self._pidfd, self._check)
        else:
            self._poll()

    def _check(self) -> None:
        code = self.popen.poll()
        if code is None:
            return
        self.release()
        if not self.exited.done():
            self.exited.set_result(code)

    def _poll(self) -> None:
        self._check()
        if not self.exited.done():
            self._tick = self._loop.call_later(0.005, self._poll)

    def release(self) -> None:
        if self._pidfd is not None:
            fd, self._pidfd = self._pidfd, None
            self._loop.remove_reader(fd)
            os.close(fd)
        if self._tick is not None:
            self._tick.cancel()


class _Pump:
    """Reads the child's output into `LogLines` as the loop says it is readable, and
    forwards lines to `logs` from a task, never making the child wait: when the consumer is
    slow, lines are dropped and counted."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        fd: int,
        logs: Logs,
        secrets: tuple[str, ...],
        on_output: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._fd: int | None = fd
        self.logs = logs
        self.lines = LogLines(secrets)
        self.dropped = 0
        self._on_output = on_output
        self._queue: collections.deque[bytes] = collections.deque()
        self._wake = asyncio.Event()
        self.eof = asyncio.Event()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)

    @property
    def tail(self) -> tuple[str, ...]:
        return tuple(self.lines.tail)

    def _readable(self) -> None:
        assert self._fd is not None
        try:
            chunk = os.read(self._fd, MAX_LINE)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            # Every chunk is news, whole lines or not: a load that prints progress dots
            # without a newline is not stalled.
            self._on_output()
            self._forward(self.lines.feed(chunk))
        else:
            self._forward(self.lines.end())
            self.close()

    def _forward(self, lines: list[bytes]) -> None:
        if not lines or self.logs is None:
            return
        room = _LOG_QUEUE - len(self._queue)
        self._queue.extend(lines[:room])
        self.dropped += max(0, len(lines) - room)
        self._wake.set()

    def close(self) -> None:
        """Stop reading (at the end of the output, or when the owner gives up on it)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._loop.remove_reader(fd)
            os.close(fd)
        self.eof.set()
        self._wake.set()

    async def write(self) -> None:
        """Forward lines to `logs` in batches until the output has ended and all is sent."""
        while True:
            if self._queue:
                data = b"".join(self._queue)
                self._queue.clear()
                if self.logs is not None:
                    try:
                        await _write(self.logs, data)
                    except (OSError, ValueError, RuntimeError):
                        self.logs = None  # a closed log sink must not take the executor down
                continue
            if self.eof.is_set():
                return
            await self._wake.wait()
            self._wake.clear()


async def _write(logs: Any, data: bytes) -> None:
    if isinstance(logs, asyncio.StreamWriter):
        logs.write(data)
        await logs.drain()
    elif isinstance(logs, io.TextIOBase) or hasattr(logs, "encoding"):
        await asyncio.to_thread(_sync_write, logs, data.decode("utf-8", errors="replace"))
    else:
        await asyncio.to_thread(_sync_write, logs, data)


def _sync_write(logs: Any, data: str | bytes) -> None:
    logs.write(data)
    logs.flush()


class Instance(InstanceState):
    """One running executor process, on an asyncio loop. Create it with `launch` or
    `open_instance`."""

    def __init__(
        self,
        plan: LaunchPlan,
        resolved: Resolved,
        process: _Child,
        pump: _Pump,
        *,
        stop_timeout: float,
        on_exit: Callable[[], None],
        executors: Executors = BUILTIN,
    ) -> None:
        super().__init__(
            plan, resolved, process.pid, pump, stop_timeout=stop_timeout, executors=executors
        )
        self._process = process
        self._pump = pump
        self._loop = asyncio.get_running_loop()
        self._on_exit = on_exit
        self._done = asyncio.Event()
        self.started_at = self._loop.time()

    async def wait(self) -> None:
        """Return when the process has exited (and its group is gone)."""
        await self._done.wait()

    async def stop(self, timeout: float = STOP_TIMEOUT, *, drain: float = 0.0) -> ExitReason:
        """One SIGTERM to the process group, SIGKILL if it is still running after `timeout`
        seconds. Idempotent, safe after the process died, and it completes even when the
        caller is cancelled meanwhile (the cancellation is raised after). With `drain`,
        first wait up to that many seconds until the executor works on no request
        (llama-server's ``/slots``), so a busy executor is stopped without cutting answers
        off."""
        await _uncancellable(self.stop_sequence(timeout, LOOP, self._gone_within, drain=drain))
        assert self._exit is not None
        return self._exit

    async def kill(self) -> ExitReason:
        """SIGKILL to the process group now, and wait for its end (a launch that failed or
        was cancelled: no grace, the executor never served anyone)."""
        await _uncancellable(self.kill_sequence(self._gone_within))
        assert self._exit is not None
        return self._exit

    async def _gone_within(self, seconds: float) -> bool:
        return await _within(self._done, seconds)

    async def output_ended_within(self, seconds: float) -> bool:
        """Whether the executor's output has been read to its end within `seconds`."""
        return await _within(self._pump.eof, seconds)

    async def supervise(self) -> None:
        """Own the process until it exits and its group is gone (one task per instance);
        when cancelled under a running child, stop it gracefully first."""
        writer = asyncio.ensure_future(self._pump.write())
        try:
            await asyncio.shield(self._process.exited)
        except asyncio.CancelledError:
            # The owner is going away (the loop shuts down) under a running child: it must
            # not outlive it, and gets the same stop as stop(), ended by the leader's exit.
            async def leader_within(seconds: float) -> bool:
                return await _within(self._process.exited, seconds)

            await _finish(self.stop_sequence(self.stop_timeout, LOOP, leader_within))
            raise
        finally:
            await _finish(self._release(writer))

    async def _release(self, writer: asyncio.Future[None]) -> None:
        await self._process.exited
        gone = asyncio.ensure_future(drive.group_gone(self.pid, asyncio.sleep))

        async def group_within(seconds: float) -> bool:
            return await _within(gone, seconds)

        await self.reap_sequence(group_within)
        gone.cancel()
        await _within(self._pump.eof, _PIPE_DRAIN)
        self._pump.close()
        # The writer is a task of its own, cancelled with every other one when the loop
        # shuts down: its lines are then lost, never the exit.
        await asyncio.wait({writer})
        if not writer.cancelled():
            writer.exception()
        self._ended(self._process.exited.result())
        self._done.set()
        self._on_exit()


_Options = drive.LaunchOptions[Logs]


async def _start(plan: LaunchPlan, opts: _Options) -> Instance:
    """Start `plan`'s executor, wait until it is ready, and leave it to its supervising
    task; raise `NotReady` (the child is dead by then) or the caller's cancellation (the
    child is killed first)."""
    ready: list[Instance] = []

    async def attempt(p: LaunchPlan) -> NotReady | None:
        inst, failed = await _attempt(p, opts)
        ready.append(inst)
        return failed

    await drive.with_port_retries(plan, attempt, opts.ports, opts.executors)
    return ready[-1]


async def _attempt(plan: LaunchPlan, opts: _Options) -> tuple[Instance, NotReady | None]:
    ex = opts.executors
    drive.before_start(plan, ex)
    loop = asyncio.get_running_loop()
    r = resolve(plan.spec.kind, plan.args, plan.env, executors=ex)
    news = _News(loop)
    # The fork must not be abandoned half-way by a cancellation: the child would be nobody's.
    spawn = asyncio.to_thread(child.spawn, child_spec(plan, os.environ, executors=ex))
    try:
        (popen, out), cancelled = await _finish(spawn)
    except OSError as e:
        raise drive.cannot_start(plan, e) from None
    pump = _Pump(loop, out, opts.logs, log_secrets(plan, r, executors=ex), news.output)
    inst = Instance(
        plan,
        r,
        _Child(popen, loop),
        pump,
        stop_timeout=opts.stop_timeout,
        on_exit=news.set,
        executors=ex,
    )
    task = loop.create_task(inst.supervise(), name=f"exedra-engine executor {inst.pid}")
    _OWNED.add(task)
    task.add_done_callback(_OWNED.discard)
    if cancelled:
        await inst.kill()
        raise asyncio.CancelledError
    probe = drive.ReadyProbe(connect_host(r.host), r.port, plan.ready, LOOP)
    outcome = await drive.await_ready(inst, probe, news, opts, LOOP, kill=inst.kill)
    if outcome == "ready":
        return inst, None
    failed = await drive.not_ready(
        inst, outcome, opts, LOOP, output_ended_within=inst.output_ended_within
    )
    return inst, failed


async def launch(
    plan: LaunchPlan,
    logs: Logs = None,
    *,
    ready_timeout: float | None = None,
    stall_timeout: float | None = None,
    stop_timeout: float = STOP_TIMEOUT,
    ports: drive.PortsReader = drive.local_ports,
    sockets: ProcessSockets | None = None,
    sources: Sequence[Source] = (),
    executors: Executors = BUILTIN,
) -> Result[Instance, EngineError]:
    """Start the plan's executor and wait until its ready path answers 200.

    The endpoint is read back from the plan's args and env. `logs` receives the executor's
    stdout and stderr line by line (a text or binary file, or an asyncio `StreamWriter`).
    The wait is bounded by `ready_timeout` (default: the load budget of the plan's files),
    by `stall_timeout` seconds without output (default `budget.STALL`) and by the caller's
    deadlines (`asyncio.timeout`, cancellation); on failure, timeout or cancellation the
    child is killed before this returns or raises, as a `NotReady` subclass that says why
    (`sources`, the plan's provenance from `explain_launch`, name the layer of a refused
    flag). The running instance is owned by a task on the running loop: call
    `Instance.stop`, or the loop's shutdown stops it (`stop_timeout` of grace). `ports`
    says which ports are taken when a scanned port was lost between planning and binding;
    `sockets` which process listens on a port (default: the local kernel). `executors` are
    those the plan's kind is looked up in (the ones it was planned with).
    """
    try:
        limits = load_limits(plan, ready_timeout, stall_timeout)
        opts = _Options(
            logs, limits, stop_timeout, ports, sockets or LocalHost(), tuple(sources), executors
        )
        inst = await _start(plan, opts)
    except EngineError as e:
        return Failure(e)
    return Success(inst)


@asynccontextmanager
async def open_instance(
    plan: LaunchPlan,
    logs: Logs = None,
    *,
    ready_timeout: float | None = None,
    stall_timeout: float | None = None,
    stop_timeout: float = STOP_TIMEOUT,
    ports: drive.PortsReader = drive.local_ports,
    sockets: ProcessSockets | None = None,
    sources: Sequence[Source] = (),
    executors: Executors = BUILTIN,
) -> AsyncIterator[Instance]:
    """``async with open_instance(plan) as inst:`` — ready on entry, stopped on exit, also on
    error or cancellation (`asyncio.timeout`, a `TaskGroup` sibling's failure). Raises the
    launch's `EngineError` if it cannot start. The options are `launch`'s."""
    limits = load_limits(plan, ready_timeout, stall_timeout)
    opts = _Options(
        logs, limits, stop_timeout, ports, sockets or LocalHost(), tuple(sources), executors
    )
    inst = await _start(plan, opts)
    try:
        yield inst
    finally:
        await inst.stop(stop_timeout)
