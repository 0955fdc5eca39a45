"""The blocking adapter: ``with run(plan) as inst:`` from a script, a REPL or a worker
thread, with no event loop of the caller's.

Each `run` owns one thread, which runs a private asyncio loop holding the asyncio adapter's
`open_instance` (`_blocking.bridge`): every policy (start, readiness, logs, stop) is that
adapter's, run as it is, and the caller's thread only waits. No signal handler is installed;
Ctrl-C inside the block, or while it waits for readiness, stops the executor, and a second
one during the stop kills it at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar, Unpack

from exedra_engine._aio import launcher as aio
from exedra_engine._blocking.bridge import Bridged
from exedra_engine._core.launch.actual import Actual
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.values import Endpoint
from exedra_engine._shell.launch.child import ExitReason
from exedra_engine._shell.launch.options import Options
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


class Running(Bridged[aio.Instance, Instance]):
    """The context manager `run` returns: ready on entry, stopped on exit."""

    def __init__(self, plan: LaunchPlan, logs: aio.Logs = None, **options: Unpack[Options]) -> None:
        self._plan = plan
        self._logs = logs
        self._options = options

    def _open(self) -> AbstractAsyncContextManager[aio.Instance]:
        return aio.open_instance(self._plan, self._logs, **self._options)

    async def _kill(self, inner: aio.Instance) -> object:
        return await inner.kill()

    def _wrap(self, inner: aio.Instance, loop: asyncio.AbstractEventLoop) -> Instance:
        return Instance(inner, loop)


def run(plan: LaunchPlan, logs: aio.Logs = None, **options: Unpack[Options]) -> Running:
    """``with run(plan) as inst:`` — start the plan's executor and block until it is ready;
    the block's end stops it (one SIGTERM, SIGKILL after `stop_timeout`), also on an
    exception or Ctrl-C. Raises the launch's `EngineError` if it cannot start, and
    `KeyboardInterrupt` after killing the executor when Ctrl-C comes during the start.
    `logs` receives the executor's lines (a text or binary file); the other options are
    `exedra_engine.aio.launch`'s (`LaunchOptions`' fields)."""
    return Running(plan, logs, **options)
