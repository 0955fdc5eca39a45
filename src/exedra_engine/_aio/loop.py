"""asyncio's primitives for the launch sequence of `exedra_engine._shell.launch`
(`AioLoop`), and asyncio's stand-in for a shielded scope: `finish` and `uncancellable`
await a step to its end even when the caller is cancelled meanwhile."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeVar

T = TypeVar("T")

_OWNED: set[asyncio.Task[object]] = set()
"""The tasks that own instances, held here so that the loop's weak references are not the
only ones."""


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

    async def spawn(self, fork: Callable[[], T]) -> T:
        result, cancelled = await finish(asyncio.to_thread(fork))
        if cancelled:
            # Asked again, as trio would deliver it at the next checkpoint: the caller sees
            # it once the child is its instance's. Counted once (asyncio.timeout compares).
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()
            task.cancel()
        return result

    async def run_owned(
        self, tasks: Sequence[Callable[[], Awaitable[object]]], body: Callable[[], Awaitable[T]]
    ) -> T:
        loop = asyncio.get_running_loop()
        for fn in tasks:
            task = loop.create_task(_run(fn), name="exedra-engine executor")
            _OWNED.add(task)
            task.add_done_callback(_OWNED.discard)
        return await body()

    async def shielded(self, aw: Awaitable[T]) -> T:
        return await uncancellable(aw)


async def _run(fn: Callable[[], Awaitable[object]]) -> object:
    return await fn()


LOOP: Final = AioLoop()
