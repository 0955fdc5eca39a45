"""trio's primitives for the launch sequence of `exedra_engine._shell.launch` (`TrioLoop`):
its clock, sleep, deadlines, events, sockets, worker threads, streams, the fork on a thread
it does not abandon, a nursery for an instance's own tasks, and a shielded scope."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
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

    async def spawn(self, fork: Callable[[], T]) -> T:
        # Not abandoned on cancellation (run_sync's default): the cancellation is raised at
        # the next checkpoint, when the child already belongs to its instance.
        return await trio.to_thread.run_sync(fork)

    async def run_owned(
        self, tasks: Sequence[Callable[[], Awaitable[object]]], body: Callable[[], Awaitable[T]]
    ) -> T:
        async with trio.open_nursery() as nursery:
            for task in tasks:
                nursery.start_soon(task)
            result = await body()
        return result

    async def shielded(self, aw: Awaitable[T]) -> T:
        with trio.CancelScope(shield=True):
            result = await aw
        return result


LOOP: Final = TrioLoop()
