"""asyncio's primitives for the launch sequence of `exedra_engine._shell.launch`
(`AioLoop`), and asyncio's stand-in for a shielded scope: `finish` and `uncancellable`
await a step to its end even when the caller is cancelled meanwhile."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

T = TypeVar("T")


async def finish(aw: Awaitable[T]) -> tuple[T, bool]:
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


async def uncancellable(aw: Awaitable[T]) -> T:
    """`aw`'s result, awaited to its end; a cancellation that came meanwhile is raised after."""
    result, cancelled = await finish(aw)
    if cancelled:
        raise asyncio.CancelledError
    return result


class Stream:
    """An asyncio connection as `exedra_engine._shell.launch.probe` uses it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    @classmethod
    async def connect(cls, host: str, port: int) -> Stream:
        return cls(*await asyncio.open_connection(host, port))

    async def send_all(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def receive_some(self, max_bytes: int) -> bytes:
        return await self._reader.read(max_bytes)

    async def aclose(self) -> None:
        self._writer.close()  # the socket is closed on the loop's next turn, whatever follows


class AioLoop:
    """asyncio's primitives (`exedra_engine._shell.launch.loop.Loop`)."""

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

    def event(self) -> asyncio.Event:
        return asyncio.Event()

    async def connect(self, host: str, port: int) -> Stream:
        return await Stream.connect(host, port)

    async def in_thread(self, fn: Callable[[], T]) -> T:
        return await asyncio.to_thread(fn)

    async def write_stream(self, sink: object, data: bytes) -> bool:
        if not isinstance(sink, asyncio.StreamWriter):
            return False
        sink.write(data)
        await sink.drain()
        return True


LOOP: Final = AioLoop()
