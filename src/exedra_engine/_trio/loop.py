"""trio's primitives for the launch sequence of `exedra_engine._shell.launch` (`TrioLoop`):
its clock, sleep, deadlines, events, sockets, worker threads and streams."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

import trio

T = TypeVar("T")


class TrioLoop:
    """trio's primitives (`exedra_engine._shell.launch.loop.Loop`)."""

    errors: tuple[type[BaseException], ...] = (trio.BrokenResourceError, trio.ClosedResourceError)

    def now(self) -> float:
        return trio.current_time()

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)

    async def within(self, seconds: float, aw: Awaitable[T]) -> T | None:
        with trio.move_on_after(seconds):
            return await aw
        return None

    def event(self) -> trio.Event:
        return trio.Event()

    async def connect(self, host: str, port: int) -> trio.SocketStream:
        return await trio.open_tcp_stream(host, port)

    async def in_thread(self, fn: Callable[[], T]) -> T:
        return await trio.to_thread.run_sync(fn)

    async def write_stream(self, sink: object, data: bytes) -> bool:
        if not isinstance(sink, trio.abc.SendStream):
            return False
        await sink.send_all(data)
        return True


LOOP: Final = TrioLoop()
