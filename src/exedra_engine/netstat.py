"""Ports in use, read from /proc/net/tcp and tcp6 text. Pure."""

from __future__ import annotations

# TCP states (include/net/tcp_states.h) that hold a local port against a new bind: listening,
# bound but not yet listening (CLOSE), and TIME_WAIT, which blocks servers that bind without
# SO_REUSEADDR (whisper-server does) for a minute after their last connection closed.
_HOLDING = frozenset({"0A", "07", "06"})


def ports_in_use(*tables: str) -> frozenset[int]:
    """Local ports held by TCP sockets in /proc/net/tcp{,6} contents."""
    ports: set[int] = set()
    for text in tables:
        for line in text.splitlines()[1:]:
            f = line.split()
            if len(f) < 4 or f[3] not in _HOLDING:
                continue
            _, _, hexport = f[1].rpartition(":")
            try:
                ports.add(int(hexport, 16))
            except ValueError:
                continue
    return frozenset(ports)
