"""The blocking adapter: ``with run(plan) as inst:`` from a script, a REPL or a worker
thread, with no event loop of the caller's.

Each `run` owns one thread, which runs a private asyncio loop holding the asyncio adapter's
`open_instance`: every policy (start, readiness, logs, stop) is that adapter's, run as it is,
and the caller's thread only waits. Why this shape:

- No signal handler is installed, anywhere: Python's own SIGINT handler raises
  `KeyboardInterrupt` in the main thread, inside the ``with`` block or while it waits for
  readiness, and the block's exit then stops the executor (the executor has its own
  session, so the terminal's Ctrl-C never reaches it directly). So `run` works as well from
  a thread of an asyncio application, where a signal handler could not be set.
- A second Ctrl-C while the stop is under way sends SIGKILL at once, instead of abandoning
  the executor; the `KeyboardInterrupt` is raised once the group is gone.
- The thread, its loop and the loop's descriptors end with the block. The fork itself
  happens on the one spawner thread of `_shell.child`, so the parent-death signal does not
  depend on this short-lived thread: that daemon thread, started by the first launch of any
  adapter, stays for the life of the process (one thread, idle between launches), as trio's
  own worker threads do.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, TypeVar

from exedra_engine._aio import launcher as aio
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.launch.actual import Actual
from exedra_engine._core.plan.layers import Source
from exedra_engine._core.values import Endpoint, LaunchPlan
from exedra_engine._shell.child import ExitReason
from exedra_engine.constants import STOP_TIMEOUT

__all__ = ["Instance", "Running", "run"]

T = TypeVar("T")


class Instance:
    """A running executor, seen from blocking code (`run` makes it)."""

    def __init__(self, inner: aio.Instance, loop: asyncio.AbstractEventLoop) -> None:
        self._inner = inner
        self._loop = loop

    @property
    def endpoint(self) -> Endpoint:
        """The instance's address and API key."""
        return self._inner.endpoint

    @property
    def pid(self) -> int:
        """The executor's process id (also its process group id)."""
        return self._inner.pid

    @property
    def plan(self) -> LaunchPlan:
        """The plan this instance runs (immutable)."""
        return self._inner.plan

    @property
    def exit_reason(self) -> ExitReason | None:
        """How the process ended; None while it runs."""
        return self._inner.exit_reason

    @property
    def log_tail(self) -> tuple[str, ...]:
        """The last lines the executor wrote (secrets redacted)."""
        return self._inner.log_tail

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the process has exited (and its group is gone), at most `timeout`
        seconds; whether it has."""
        if self._inner.exit_reason is None:
            with contextlib.suppress(concurrent.futures.TimeoutError):
                self._call(self._inner.wait(), timeout)
        return self._inner.exit_reason is not None

    @property
    def actual(self) -> Actual | None:
        """What the executor really runs with, read once it was ready."""
        return self._inner.actual

    def stop(self, timeout: float = STOP_TIMEOUT, *, drain: float = 0.0) -> ExitReason:
        """One SIGTERM to the process group, SIGKILL after `timeout` seconds; returns once
        the group is gone. Idempotent. With `drain`, first wait up to that many seconds
        until the executor works on no request."""
        if self._inner.exit_reason is None:
            self._call(self._inner.stop(timeout, drain=drain), None)
        reason = self._inner.exit_reason
        assert reason is not None
        return reason

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        try:
            fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        except RuntimeError:  # the loop has ended, and the executor with it
            coro.close()
            raise
        return fut.result(timeout)

    def __repr__(self) -> str:
        return repr(self._inner)


class Running:
    """The context manager `run` returns: ready on entry, stopped on exit."""

    def __init__(
        self,
        plan: LaunchPlan,
        logs: aio.Logs = None,
        *,
        ready_timeout: float | None = None,
        stall_timeout: float | None = None,
        stop_timeout: float = STOP_TIMEOUT,
        sources: Sequence[Source] = (),
        executors: Executors = BUILTIN,
    ) -> None:
        self._plan = plan
        self._executors = executors
        self._logs = logs
        self._ready_timeout = ready_timeout
        self._stall_timeout = stall_timeout
        self._stop_timeout = stop_timeout
        self._sources = tuple(sources)
        self._inner: aio.Instance | None = None

    def __enter__(self) -> Instance:
        # Made here, not in __init__: a `run(plan)` never entered holds no loop or thread.
        self._loop = asyncio.new_event_loop()
        self._leave = asyncio.Event()
        self._ready: concurrent.futures.Future[aio.Instance] = concurrent.futures.Future()
        self._ended = threading.Event()
        self._task = self._loop.create_task(self._serve())
        self._thread = threading.Thread(target=self._run, name="exedra-engine-run", daemon=True)
        self._thread.start()
        try:
            inner = self._ready.result()
        except BaseException:
            self._finish(self._task.cancel)
            raise
        return Instance(inner, self._loop)

    async def _serve(self) -> None:
        try:
            async with aio.open_instance(
                self._plan,
                self._logs,
                ready_timeout=self._ready_timeout,
                stall_timeout=self._stall_timeout,
                stop_timeout=self._stop_timeout,
                sources=self._sources,
                executors=self._executors,
            ) as inst:
                self._inner = inst
                self._ready.set_result(inst)
                await self._leave.wait()
        except BaseException as e:
            if not self._ready.done():
                self._ready.set_exception(e)
            if not isinstance(e, (Exception, asyncio.CancelledError)):
                raise

    def _run(self) -> None:
        loop = self._loop
        try:
            with contextlib.suppress(BaseException):
                loop.run_until_complete(self._task)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
            self._ended.set()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._finish(self._leave.set)

    def _finish(self, how: Any) -> None:
        """Ask the loop to end the instance (`how`), and wait until the thread is done; a
        Ctrl-C meanwhile turns the stop into SIGKILL, and is raised afterwards."""
        self._soon(how)
        interrupted: KeyboardInterrupt | None = None
        # Not Thread.join: a KeyboardInterrupt that interrupts it marks the thread as ended
        # while it still runs (Python 3.11's _wait_for_tstate_lock), and the wait would end
        # before the executor's.
        while not self._ended.is_set():
            try:
                self._ended.wait()
            except KeyboardInterrupt as e:
                interrupted = e
                self._soon(self._kill)
        self._thread.join()
        if interrupted is not None:
            raise interrupted

    def _kill(self) -> None:
        if self._inner is not None:
            self._loop.create_task(self._inner.kill())
        self._task.cancel()

    def _soon(self, fn: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has already ended
            self._loop.call_soon_threadsafe(fn)


def run(
    plan: LaunchPlan,
    logs: aio.Logs = None,
    *,
    ready_timeout: float | None = None,
    stall_timeout: float | None = None,
    stop_timeout: float = STOP_TIMEOUT,
    sources: Sequence[Source] = (),
    executors: Executors = BUILTIN,
) -> Running:
    """``with run(plan) as inst:`` — start the plan's executor and block until it is ready;
    the block's end stops it (one SIGTERM, SIGKILL after `stop_timeout`), also on an
    exception or Ctrl-C. Raises the launch's `EngineError` if it cannot start, and
    `KeyboardInterrupt` after killing the executor when Ctrl-C comes during the start.
    `logs` receives the executor's lines (a text or binary file); the other options are
    `exedra_engine.aio.launch`'s."""
    return Running(
        plan,
        logs,
        ready_timeout=ready_timeout,
        stall_timeout=stall_timeout,
        stop_timeout=stop_timeout,
        sources=sources,
        executors=executors,
    )
