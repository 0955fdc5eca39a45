"""The trio log pump: reads the executor's output into `LogLines` and forwards the lines to
the caller's sink (`exedra_engine._shell.launch.loop.write_logs`) without ever making the
executor wait."""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Final

import trio

from exedra_engine._core.launch.logs import MAX_LINE, LogLines
from exedra_engine._shell.launch.loop import write_logs
from exedra_engine._trio.loop import LOOP

Logs = IO[str] | IO[bytes] | trio.abc.SendStream | None
"""Where an executor's lines go: a text or binary file, a trio stream, or nowhere."""

_LOG_QUEUE: Final = 4096


class LogPump:
    """Reads the child's output, keeps the last lines, and forwards lines to `logs`: when the
    consumer is slow, lines are dropped and counted. `on_output` is called for every chunk
    read, whole lines or not (the readiness poll wakes on it, and a load that prints progress
    dots without a newline is not stalled)."""

    def __init__(
        self, logs: Logs, secrets: tuple[str, ...], on_output: Callable[[], None] = lambda: None
    ) -> None:
        self.logs = logs
        self.lines = LogLines(secrets)
        self.dropped = 0
        self.on_output = on_output
        self.ended = trio.Event()
        """Set once the output has ended (every writer closed the pipe), or was given up."""
        self._send, self._recv = trio.open_memory_channel[bytes](_LOG_QUEUE)
        self._reading = trio.CancelScope()

    def stop_reading(self) -> None:
        """Give up on the rest of the output (the pipe is held open by a process nobody
        owns): `pump` ends as if the output had ended."""
        self._reading.cancel()

    @property
    def tail(self) -> tuple[str, ...]:
        """The last lines, redacted (after the first error lines that left them)."""
        return self.lines.kept()

    async def read(self, stream: trio.abc.ReceiveStream) -> None:
        """Read `stream` to its end; closes the forwarding channel when done."""
        try:
            async with self._send:
                try:
                    while True:
                        try:
                            chunk = await stream.receive_some(MAX_LINE)
                        except (trio.ClosedResourceError, trio.BrokenResourceError):
                            chunk = b""
                        if not chunk:
                            break
                        self.on_output()
                        self._forward(self.lines.feed(bytes(chunk)))
                finally:  # also when stopped: what was read is kept, the rest is lost
                    self._forward(self.lines.end())
        finally:
            self.ended.set()

    def _forward(self, lines: list[bytes]) -> None:
        for line in lines:
            if self.logs is None:
                continue
            try:
                self._send.send_nowait(line)
            except trio.WouldBlock:
                self.dropped += 1

    async def write(self) -> None:
        """Forward lines to `logs` in batches until the reader is done."""
        async with self._recv:
            while True:
                try:
                    batch = [await self._recv.receive()]
                except trio.EndOfChannel:
                    return
                while True:
                    try:
                        batch.append(self._recv.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                if self.logs is None:
                    continue
                try:
                    await write_logs(self.logs, b"".join(batch), LOOP)
                except (OSError, ValueError, trio.BrokenResourceError, trio.ClosedResourceError):
                    self.logs = None  # a closed log sink must not take the executor down

    async def pump(self, stream: trio.abc.ReceiveStream) -> None:
        """Read `stream` to its end (or until `stop_reading`), then close it."""
        try:
            with self._reading:
                await self.read(stream)
        finally:
            await stream.aclose()
