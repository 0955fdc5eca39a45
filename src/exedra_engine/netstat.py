"""Ports in use, read from /proc/net/tcp and tcp6 text. Pure."""

from __future__ import annotations

# TCP states (include/net/tcp_states.h): a socket that is listening, or bound and not yet
# listening (CLOSE with no peer), holds its port against a new bind.
_LISTEN = "0A"
_CLOSE = "07"


def ports_in_use(*tables: str) -> frozenset[int]:
    """Local ports of listening or bound TCP sockets in /proc/net/tcp{,6} contents."""
    ports: set[int] = set()
    for text in tables:
        for line in text.splitlines()[1:]:
            f = line.split()
            if len(f) < 4 or f[3] not in (_LISTEN, _CLOSE):
                continue
            _, _, hexport = f[1].rpartition(":")
            try:
                ports.add(int(hexport, 16))
            except ValueError:
                continue
    return frozenset(ports)
