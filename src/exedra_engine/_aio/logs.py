"""The asyncio log pump: reads the child's output into `LogLines` as the loop says it is
readable (``add_reader``), and forwards lines to the caller's sink from a task
(`exedra_engine._shell.launch.loop.write_logs`), never making the child wait."""

from __future__ import annotations

import asyncio
import collections
import os
from collections.abc import Callable
from typing import IO, Final

from exedra_engine._aio.loop import LOOP
from exedra_engine._core.launch.logs import MAX_LINE, LogLines
from exedra_engine._shell.launch.loop import write_logs

Logs = IO[str] | IO[bytes] | asyncio.StreamWriter | None
"""Where an executor's lines go: a text or binary file, an asyncio stream, or nowhere."""

_LOG_QUEUE: Final = 4096


class Pump:
    """Reads the child's output and forwards lines to `logs`: when the consumer is slow,
    lines are dropped and counted."""

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
        self.ended = asyncio.Event()
        """Set once the output has ended, or was given up on."""
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)

    @property
    def tail(self) -> tuple[str, ...]:
        return self.lines.kept()

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
            self.stop_reading()

    def _forward(self, lines: list[bytes]) -> None:
        if not lines or self.logs is None:
            return
        room = _LOG_QUEUE - len(self._queue)
        self._queue.extend(lines[:room])
        self.dropped += max(0, len(lines) - room)
        self._wake.set()

    def stop_reading(self) -> None:
        """Stop reading (at the end of the output, or when the owner gives up on it)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._loop.remove_reader(fd)
            os.close(fd)
        self.ended.set()
        self._wake.set()

    async def write(self) -> None:
        """Forward lines to `logs` in batches until the output has ended and all is sent."""
        while True:
            if self._queue:
                data = b"".join(self._queue)
                self._queue.clear()
                if self.logs is not None:
                    try:
                        await write_logs(self.logs, data, LOOP)
                    except (OSError, ValueError, RuntimeError):
                        self.logs = None  # a closed log sink must not take the executor down
                continue
            if self.ended.is_set():
                return
            await self._wake.wait()
            self._wake.clear()
