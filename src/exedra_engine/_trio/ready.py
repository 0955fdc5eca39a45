"""Waiting for readiness in trio: the request and its parsing are `exedra_engine._core.
readiness`'s; this module only holds the connection and the clock.

The ready path is asked on loopback every 0.5 ms at first, backing off to every 5 ms, and at
once whenever the executor logs a line or exits. Connection refused, 503 and timeouts mean
"not yet".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import trio

from exedra_engine._core import readiness
from exedra_engine._core.readiness import LoadLimits
from exedra_engine._shell.ports import ProcessSockets

Outcome = Literal["ready", "exited", "timeout", "stalled"]


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


class Poller:
    """Asks the ready path on one keep-alive connection, reconnecting only when the
    executor refused or closed it."""

    def __init__(self, host: str, port: int, path: str) -> None:
        self.host = host
        self.port = port
        self.request = readiness.request(host, port, path)
        self.stream: trio.SocketStream | None = None
        self.buf = b""
        self.connections = 0

    async def ready(self) -> bool:
        """One poll: True on 200; refused, 503, a timeout or a reset are "not yet"."""
        with trio.move_on_after(readiness.PROBE_TIMEOUT):
            try:
                return await self._ask()
            except (
                OSError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                readiness.Malformed,
            ):
                await self.close()
                return False
        await self.close()  # a half-read answer is lost with its connection
        return False

    async def _ask(self) -> bool:
        if self.stream is None:
            self.stream = await trio.open_tcp_stream(self.host, self.port)
            # Refused attempts leave no socket behind; established ones end in TIME_WAIT.
            self.connections += 1
            self.buf = b""
        await self.stream.send_all(self.request)
        while True:
            answer = readiness.parse(self.buf)
            if answer is not None:
                self.buf = self.buf[answer.consumed :]
                # llama-server marks every 503 while loading "Connection: close" but keeps
                # answering on the socket (checked with the binary); closing on the header
                # would cost a connection per poll, ~300 for a 5 s load. So the connection is
                # dropped only when the executor really closes it, or the answer was unframed.
                if not answer.framed:
                    await self.close()
                return answer.status == 200
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                raise trio.BrokenResourceError("closed by the executor")
            self.buf += chunk

    async def close(self) -> None:
        if self.stream is not None:
            stream, self.stream = self.stream, None
            with trio.CancelScope(shield=True):
                await stream.aclose()


def owns_port(sockets: ProcessSockets, pid: int, port: int) -> bool:
    """Whether the socket listening on `port` is process `pid`'s (see
    `readiness.answered_by_executor`)."""
    listening = sockets.listener_inodes(port)
    held = sockets.socket_inodes(pid) if listening else None
    state = "" if held is not None or not listening else _state(sockets, pid)
    return readiness.answered_by_executor(listening, held, state)


def _state(sockets: ProcessSockets, pid: int) -> str:
    return readiness.proc_state(sockets.read_text(f"/proc/{pid}/stat") or "")


async def until_ready(
    poller: Poller,
    exited: Callable[[], bool],
    nudge: Nudge,
    *,
    limits: LoadLimits,
    sockets: ProcessSockets,
    pid: int,
) -> Outcome:
    """Poll until the ready path answers 200 from process `pid`, the process exits, or a
    limit of `limits` passes (counted from now)."""
    started = trio.current_time()
    interval = readiness.POLL_FIRST
    while True:
        if exited():
            return "exited"
        if await poller.ready():
            if owns_port(sockets, pid, poller.port):
                return "ready"
            # Another process answered on our port: ours lost the bind, or has not bound
            # yet. Its exit, or its own answer, decides.
            await poller.close()
        now = trio.current_time()
        overdue = limits.overdue(started, nudge.last_output, now)
        if overdue is not None:
            return overdue
        await nudge.wait(min(interval, limits.left(started, nudge.last_output, now)))
        interval = readiness.next_interval(interval)


async def get_json(host: str, port: int, path: str, key: str, timeout: float) -> object:
    """One GET of `path` on its own connection, its body decoded as JSON; None on any
    failure (refused, not 200, not JSON, slower than `timeout`)."""
    with trio.move_on_after(timeout):
        try:
            stream = await trio.open_tcp_stream(host, port)
        except OSError:
            return None
        async with stream:
            try:
                await stream.send_all(readiness.request(host, port, path, key))
                buf = b""
                while (answer := readiness.parse(buf)) is None:
                    chunk = await stream.receive_some(65536)
                    if not chunk:
                        return None
                    buf += chunk
            except (OSError, trio.BrokenResourceError, readiness.Malformed):
                return None
            return readiness.json_body(buf, answer) if answer.status == 200 else None
    return None
