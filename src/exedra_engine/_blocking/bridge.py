"""An asyncio context manager entered and left from blocking code, on a private thread.

`Bridge` owns one thread, which runs a private asyncio loop holding the async context
manager (the asyncio adapter's `open_instance`, or `open_group`): every policy is that
adapter's, run as it is, and the caller's thread only waits. Why this shape:

- No signal handler is installed, anywhere: Python's own SIGINT handler raises
  `KeyboardInterrupt` in the main thread, inside the ``with`` block or while it waits for
  readiness, and the block's exit then stops the executors (they have their own sessions,
  so the terminal's Ctrl-C never reaches them directly). So it works as well from a thread
  of an asyncio application, where a signal handler could not be set.
- A second Ctrl-C while the stop is under way kills at once (`kill`), instead of
  abandoning the executors; the `KeyboardInterrupt` is raised once they are gone.
- The thread, its loop and the loop's descriptors end with the block. The fork itself
  happens on the one spawner thread of `_shell.launch.child`, so the parent-death signal does not
  depend on this short-lived thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")


class Bridge(Generic[T]):
    """``opened = bridge.enter()`` blocks until `open()`'s block is entered on the private
    loop, and returns what it yields; `leave` ends the block and waits until it has ended.
    `kill` is what a second Ctrl-C during the leave runs on what was yielded."""

    def __init__(
        self,
        open: Callable[[], AbstractAsyncContextManager[T]],
        kill: Callable[[T], Awaitable[object]],
    ) -> None:
        self._open = open
        self._kill_fn = kill
        self._inner: T | None = None

    def enter(self) -> T:
        # Made here, not in __init__: a bridge never entered holds no loop or thread.
        self.loop = asyncio.new_event_loop()
        self._leave = asyncio.Event()
        self._ready: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._ended = threading.Event()
        self._task = self.loop.create_task(self._serve())
        self._thread = threading.Thread(target=self._run, name="exedra-engine-run", daemon=True)
        self._thread.start()
        try:
            return self._ready.result()
        except BaseException:
            self._finish(self._task.cancel)
            raise

    def leave(self) -> None:
        """End the block (its own exit stops the executors) and wait until it has ended."""
        self._finish(self._leave.set)

    async def _serve(self) -> None:
        try:
            async with self._open() as inner:
                self._inner = inner
                self._ready.set_result(inner)
                await self._leave.wait()
        except BaseException as e:
            if not self._ready.done():
                self._ready.set_exception(e)
            if not isinstance(e, (Exception, asyncio.CancelledError)):
                raise

    def _run(self) -> None:
        loop = self.loop
        try:
            with contextlib.suppress(BaseException):
                loop.run_until_complete(self._task)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
            self._ended.set()

    def _finish(self, how: Any) -> None:
        """Ask the loop to end the block (`how`), and wait until the thread is done; a
        Ctrl-C meanwhile turns the stop into a kill, and is raised afterwards."""
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
            self.loop.create_task(self._kill_fn(self._inner))  # type: ignore[arg-type]
        self._task.cancel()

    def _soon(self, fn: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has already ended
            self.loop.call_soon_threadsafe(fn)


class Bridged(Generic[T, U]):
    """A blocking context manager over an asyncio one (`Bridge`): `_open` makes the asyncio
    block, `_kill` kills what it yields at a second Ctrl-C, `_wrap` makes what the caller
    holds from it and the private loop."""

    def _open(self) -> AbstractAsyncContextManager[T]:
        raise NotImplementedError

    async def _kill(self, inner: T) -> object:
        raise NotImplementedError

    def _wrap(self, inner: T, loop: asyncio.AbstractEventLoop) -> U:
        raise NotImplementedError

    def __enter__(self) -> U:
        self._bridge = Bridge(self._open, self._kill)
        return self._wrap(self._bridge.enter(), self._bridge.loop)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._bridge.leave()
