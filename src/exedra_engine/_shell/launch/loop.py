"""What an adapter hands the launch sequence: its primitives (`Loop`: a clock, a sleep, a
deadline, an event, a connection, a worker thread, a write to its kind of stream, a fork
that is never abandoned, tasks that own an instance, a shielded step: trio's
``_subprocess_platform`` idea, a few documented stubs under one sequence), and the
two things built on them once for every adapter: `News`, what the readiness poll waits on,
and `write_logs`, the one writer of an executor's lines to the caller's sink."""

from __future__ import annotations

import functools
import io
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

from exedra_engine._shell.group_logs import MemberLogs

T = TypeVar("T")


class Event(Protocol):
    """A one-way flag a task can wait on (``trio.Event``, ``asyncio.Event``)."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> Any: ...


class Connection(Protocol):
    """A TCP connection as an adapter gives it (a trio ``SocketStream`` is one)."""

    async def send_all(self, data: bytes) -> None: ...

    async def receive_some(self, max_bytes: int) -> bytes:
        """Up to `max_bytes`; b"" once the peer has closed."""
        ...

    async def aclose(self) -> None: ...


class Loop(Protocol):
    """An adapter's primitives: all the launch sequence needs of its event loop."""

    errors: tuple[type[BaseException], ...]
    """What its connections raise when the peer goes away (beyond `OSError`)."""

    def now(self) -> float:
        """Its clock, in seconds."""
        ...

    async def sleep(self, seconds: float) -> None: ...

    async def within(self, seconds: float, aw: Awaitable[T]) -> T | None:
        """`aw`'s result, or None when `seconds` passed first (`aw` is then cancelled)."""
        ...

    def event(self) -> Event:
        """A new, unset event."""
        ...

    async def connect(self, host: str, port: int) -> Connection:
        """A TCP connection; raises `OSError` when refused."""
        ...

    async def in_thread(self, fn: Callable[[], T]) -> T:
        """`fn()` on a worker thread, so a blocking call never sits on the loop."""
        ...

    async def write_stream(self, sink: object, data: bytes) -> bool:
        """Write `data` to `sink` if it is the adapter's own kind of stream (a trio
        ``SendStream``, an asyncio ``StreamWriter``); False if it is not one."""
        ...

    async def spawn(self, fork: Callable[[], T]) -> T:
        """`fork()` (it starts a child) on a worker thread, awaited to its end: a
        cancellation meanwhile is delivered at the caller's next wait, once the child is
        someone's (never abandoned half-way)."""
        ...

    async def run_owned(
        self, tasks: Sequence[Callable[[], Awaitable[object]]], body: Callable[[], Awaitable[T]]
    ) -> T:
        """Start `tasks`, which own an instance for its whole life (its supervision, its log
        pump), and run `body` meanwhile (the wait for readiness); body's result. trio runs
        them in a nursery of the calling task, so this returns once they have ended too;
        asyncio leaves them running as tasks of the loop."""
        ...

    async def shielded(self, aw: Awaitable[T]) -> T:
        """`aw`'s result, awaited to its end even if the caller is cancelled meanwhile; the
        cancellation is seen after (a stop, a kill, a reap must not be cut short)."""
        ...


class News:
    """One event that every source of news sets (a log line, the exit) and the readiness
    poll waits on, so a poll tick opens no task of its own. Remembers when output last
    came, on the adapter's clock."""

    def __init__(self, loop: Loop) -> None:
        self._loop = loop
        self._event = loop.event()
        self.last_output = loop.now()

    def output(self) -> None:
        """The executor wrote something."""
        self.last_output = self._loop.now()
        self._event.set()

    def set(self) -> None:
        """Something happened (the exit)."""
        self._event.set()

    async def wait(self, timeout: float) -> None:
        """Until news or `timeout`; news that came before the call counts."""
        if not self._event.is_set():
            await self._loop.within(timeout, self._event.wait())
        if self._event.is_set():
            self._event = self._loop.event()


async def write_logs(sink: object, data: bytes, loop: Loop) -> None:
    """Write an executor's lines to the caller's `sink`: the adapter's kind of stream, or a
    text or binary file (on a worker thread, flushed); a group member's share of its
    group's sink (`MemberLogs`) tagged with its id, or handed to the group's callable on
    this thread. Raises what the sink raises."""
    if isinstance(sink, MemberLogs):
        if sink.calls:
            sink.call(data)
            return
        data, sink = sink.tagged(data), sink.sink
    if await loop.write_stream(sink, data):
        return
    text = isinstance(sink, io.TextIOBase) or hasattr(sink, "encoding")
    out: str | bytes = data.decode("utf-8", errors="replace") if text else data
    await loop.in_thread(functools.partial(_write_file, sink, out))


def _write_file(sink: Any, data: str | bytes) -> None:
    sink.write(data)
    sink.flush()
