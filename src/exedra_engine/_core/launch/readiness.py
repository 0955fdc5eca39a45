"""The readiness request and the reading of its answer, as bytes. Pure: no socket here.

The launcher keeps one HTTP/1.1 keep-alive connection to the executor while it loads and
asks the ready path again on it, so a load that takes a minute costs a handful of
connections, not thousands of sockets left in TIME_WAIT on the server's port.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Final, Literal

from exedra_engine._core.struct import Value

MAX_HEAD: Final = 16 * 1024
"""A response head longer than this is not an executor's: the connection is dropped."""
POLL_FIRST: Final = 0.0005
"""The first interval between polls: a small model is ready within milliseconds."""
POLL_MAX: Final = 0.005
POLL_GROWTH: Final = 1.25
PROBE_TIMEOUT: Final = 1.0
"""One poll's answer must come within this; a slower one counts as "not yet"."""


class Answer(Value, frozen=True, kw_only=True):
    """One complete response read from the front of a buffer."""

    status: int
    consumed: int
    """How many bytes of the buffer the response took (head and body)."""
    keep_alive: bool
    """Whether the connection may carry the next request, by the headers."""
    framed: bool = True
    """Whether the body's length was known, so the next answer can be told apart."""
    body_start: int = 0
    """Where the body begins in the buffer."""


class Malformed(ValueError):
    """The bytes are not an HTTP/1.x response: drop the connection."""


def host_header(host: str, port: int) -> str:
    """The Host header value; an IPv6 literal goes in brackets (RFC 9110 §7.2)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def request(host: str, port: int, path: str, key: str = "") -> bytes:
    """A GET of `path` that asks to keep the connection open (with `key` as a bearer token
    when given: the executor's other endpoints need it)."""
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host_header(host, port)}\r\n{auth}"
        "Connection: keep-alive\r\nAccept: */*\r\n\r\n"
    ).encode()


def parse(buf: bytes) -> Answer | None:
    """The first response in `buf`, or None while more bytes are needed.

    Raises `Malformed` for anything that is not an HTTP/1.x response with a known length;
    a body without Content-Length (or chunked) makes the connection single-use.
    """
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD:
            raise Malformed("response head too long")
        return None
    lines = buf[:end].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise Malformed(f"not an HTTP/1.x status line: {lines[0][:80]!r}")
    status = int(parts[1])
    length: int | None = None
    keep = parts[0] == b"HTTP/1.1"
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        value = value.strip().lower()
        if name == b"content-length":
            if not value.isdigit():
                raise Malformed("bad Content-Length")
            length = int(value)
        elif name == b"connection":
            keep = value == b"keep-alive" if not keep else value != b"close"
        elif name == b"transfer-encoding":
            keep = False
    body = end + 4
    if length is None:
        # No length: the body runs to the end of the connection; the status is all we need.
        return Answer(
            status=status, consumed=len(buf), keep_alive=False, framed=False, body_start=body
        )
    if len(buf) < body + length:
        return None
    return Answer(status=status, consumed=body + length, keep_alive=keep, body_start=body)


def json_body(buf: bytes, answer: Answer) -> object:
    """The answer's body decoded as JSON; None when it is not JSON."""
    try:
        return json.loads(buf[answer.body_start : answer.consumed])
    except ValueError:
        return None


def busy_slots(slots: object, field: str) -> int:
    """How many slots of an executor's slots listing work on a request (0 if not a list)."""
    if not isinstance(slots, list):
        return 0
    return sum(1 for s in slots if isinstance(s, dict) and bool(s.get(field)))


def field_at(value: object, path: Sequence[str]) -> int | None:
    """The integer at `path` in a decoded JSON object, or None."""
    for name in path:
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def prefix_of(ready: str, ready_path: str) -> str:
    """The path prefix the plan put before every endpoint (``--api-prefix``), from its ready
    path and the profile's."""
    return ready[: -len(ready_path)] if ready_path and ready.endswith(ready_path) else ""


def next_interval(interval: float) -> float:
    """The wait after a poll that waited `interval`: growing from `POLL_FIRST` to `POLL_MAX`.
    A new log line or the exit cuts a wait short (the adapter's business)."""
    return min(interval * POLL_GROWTH, POLL_MAX)


def answered_by_executor(
    listening: frozenset[int] | None, held: frozenset[int] | None, state: str
) -> bool:
    """Whether a 200 on the port came from the executor, from the kernel's facts: the inodes
    of the sockets `listening` on the port, those the executor `held`, and its process
    `state` letter (``/proc/PID/stat``). A stranger that took the port must not make a
    launch ready; True when the kernel cannot tell."""
    if not listening:  # the kernel cannot be asked (or the listener just went): trust the 200
        return True
    if held is None:
        # No descriptors to list: the executor has exited (a zombie has none), or /proc hides
        # them. Only a live process whose descriptors are hidden is given the benefit.
        return bool(state) and state not in ("Z", "X")
    return not listening.isdisjoint(held)


def proc_state(stat: str) -> str:
    """The state letter of a ``/proc/PID/stat`` line ("" when unreadable)."""
    fields = stat.rpartition(")")[2].split()
    return fields[0] if fields else ""


Overdue = Literal["timeout", "stalled"]


class LoadLimits(Value, frozen=True, kw_only=True):
    """How long a load may take: `budget` seconds in all, and at most `stall` seconds with
    no output from the executor (a hung load writes nothing; a slow one keeps logging)."""

    budget: float = math.inf
    stall: float = math.inf

    def overdue(self, started: float, last_output: float, now: float) -> Overdue | None:
        """Which limit has passed at `now`, if one has (the budget first)."""
        if now - started >= self.budget:
            return "timeout"
        if now - last_output >= self.stall:
            return "stalled"
        return None

    def left(self, started: float, last_output: float, now: float) -> float:
        """Seconds until the nearest limit."""
        return max(0.0, min(started + self.budget, last_output + self.stall) - now)
