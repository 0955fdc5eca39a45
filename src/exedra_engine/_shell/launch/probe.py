"""The ready path asked over an adapter's connections: `ReadyProbe` (one keep-alive
connection, re-opened only when the executor closes it) and `get_json` (one GET of a JSON
body). The bytes and their parsing are `exedra_engine._core.launch.readiness`'s."""

from __future__ import annotations

from exedra_engine._core.launch import readiness
from exedra_engine._shell.launch.loop import Connection, Loop


async def _exchange(conn: Connection, request: bytes, buf: bytes) -> tuple[readiness.Answer, bytes]:
    """Send `request` and read one whole answer; the answer and the buffer it stands at the
    front of (`buf`: what the connection had left over)."""
    await conn.send_all(request)
    while (answer := readiness.parse(buf)) is None:
        chunk = await conn.receive_some(65536)
        if not chunk:
            raise ConnectionResetError("closed by the executor")
        buf += chunk
    return answer, buf


class ReadyProbe:
    """Asks the ready path on one keep-alive connection (`readiness` holds its bytes),
    reconnecting only when the executor refused or closed it."""

    def __init__(self, host: str, port: int, path: str, loop: Loop) -> None:
        self.host = host
        self.port = port
        self.request = readiness.request(host, port, path)
        self.connections = 0
        self._loop = loop
        self._errors: tuple[type[BaseException], ...] = (
            *loop.errors,
            OSError,
            readiness.Malformed,
        )
        self._conn: Connection | None = None
        self._buf = b""

    async def ready(self) -> bool:
        """One poll: True on 200; refused, 503, a timeout or a reset are "not yet"."""
        try:
            answered = await self._loop.within(readiness.PROBE_TIMEOUT, self._ask())
        except self._errors:
            answered = None
        if answered is None:
            await self.close()  # a half-read answer is lost with its connection
        return bool(answered)

    async def _ask(self) -> bool:
        if self._conn is None:
            self._conn = await self._loop.connect(self.host, self.port)
            # Refused attempts leave no socket behind; established ones end in TIME_WAIT.
            self.connections += 1
            self._buf = b""
        answer, buf = await _exchange(self._conn, self.request, self._buf)
        self._buf = buf[answer.consumed :]
        # llama-server marks every 503 while loading "Connection: close" but keeps
        # answering on the socket (checked with the binary); closing on the header would
        # cost a connection per poll, ~300 for a 5 s load. So the connection is dropped
        # only when the executor really closes it, or the answer was unframed.
        if not answer.framed:
            await self.close()
        return answer.status == 200

    async def close(self) -> None:
        """Drop the connection (the next poll opens another)."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.aclose()


async def get_json(
    loop: Loop, host: str, port: int, path: str, *, key: str, timeout: float
) -> object:
    """One GET of `path` on its own connection, its body decoded as JSON; None on any
    failure (refused, not 200, not JSON, slower than `timeout`)."""
    errors: tuple[type[BaseException], ...] = (*loop.errors, OSError, readiness.Malformed)

    async def ask() -> object:
        conn = await loop.connect(host, port)
        try:
            answer, buf = await _exchange(conn, readiness.request(host, port, path, key), b"")
        finally:
            await conn.aclose()
        return readiness.json_body(buf, answer) if answer.status == 200 else None

    try:
        return await loop.within(timeout, ask())
    except errors:
        return None
