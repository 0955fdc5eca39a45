"""Ports in use, read from /proc/net/tcp and tcp6 text. Pure."""

from __future__ import annotations

# TCP states (include/net/tcp_states.h) that hold a local port against a new bind: listening and
# bound but not yet listening (CLOSE). TIME_WAIT ("06") blocks only a server that binds without
# SO_REUSEADDR, for a minute after its last connection closed: whether it counts is a fact
# about each executor (`kinds.TIME_WAIT_BLOCKS_BIND`), so it is the caller's to say.
_HOLDING = frozenset({"0A", "07"})
_TIME_WAIT = "06"


def ports_in_use(*tables: str, time_wait: bool = False) -> frozenset[int]:
    """Local ports held by TCP sockets in /proc/net/tcp{,6} contents; with `time_wait`,
    ports with a socket in TIME_WAIT count as held too."""
    holding = _HOLDING | {_TIME_WAIT} if time_wait else _HOLDING
    ports: set[int] = set()
    for text in tables:
        for line in text.splitlines()[1:]:
            f = line.split()
            if len(f) < 4 or f[3] not in holding:
                continue
            _, _, hexport = f[1].rpartition(":")
            try:
                ports.add(int(hexport, 16))
            except ValueError:
                continue
    return frozenset(ports)
