"""Waiting for readiness in trio: the request and its parsing are `exedra_engine._core.
readiness`'s, the poll loop and the probe's conversation `exedra_engine._shell.drive`'s;
this module only gives them trio's primitives (`TrioLoop`).

The ready path is asked on loopback every 0.5 ms at first, backing off to every 5 ms, and at
once whenever the executor logs a line or exits. Connection refused, 503 and timeouts mean
"not yet".
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import trio

from exedra_engine._shell import drive

Outcome = drive.Outcome
T = TypeVar("T")


class Nudge:
    """One event that every source of news sets (a log line, the exit) and the poll waits
    on, so a poll tick opens no task of its own. Remembers when output last came."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self.last_output = trio.current_time()

    def output(self) -> None:
        """The executor wrote something."""
        self.last_output = trio.current_time()
        self._event.set()

    def set(self) -> None:
        self._event.set()

    async def wait(self, timeout: float) -> None:
        """Until news or `timeout`; news that came before the call counts."""
        with trio.move_on_after(timeout):
            await self._event.wait()
        if self._event.is_set():
            self._event = trio.Event()


class TrioLoop:
    """trio's primitives for `exedra_engine._shell.drive`'s loops."""

    errors: tuple[type[BaseException], ...] = (trio.BrokenResourceError, trio.ClosedResourceError)

    def now(self) -> float:
        return trio.current_time()

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)

    async def within(self, seconds: float, aw: Awaitable[T]) -> T | None:
        with trio.move_on_after(seconds):
            return await aw
        return None

    async def connect(self, host: str, port: int) -> trio.SocketStream:
        return await trio.open_tcp_stream(host, port)

    async def in_thread(self, fn: Callable[[], T]) -> T:
        return await trio.to_thread.run_sync(fn)


LOOP: Final = TrioLoop()


def poller(host: str, port: int, path: str) -> drive.ReadyProbe:
    """The ready path's probe (`drive.ReadyProbe`) on trio's sockets and deadlines."""
    return drive.ReadyProbe(host, port, path, LOOP)
