"""Ports in use, from /proc/net/tcp and tcp6 text or from a netlink sock_diag dump. Pure.

Reading /proc/net/tcp costs ~5 ms a read here: the kernel walks its whole TCP hash table for
each read, and once more for the read that finds the end. A sock_diag dump asks for the
sockets in the states that matter, in ~1 ms; the bytes of both are parsed here.
"""

from __future__ import annotations

import struct
from typing import Final

# TCP states (include/net/tcp_states.h) that hold a local port against a new bind: listening and
# bound but not yet listening (CLOSE). TIME_WAIT ("06") blocks only a server that binds without
# SO_REUSEADDR, for a minute after its last connection closed: whether it counts is a fact
# about each executor (its profile's `time_wait_blocks_bind`), so it is the caller's to say.
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


# linux/netlink.h, linux/sock_diag.h, linux/inet_diag.h
NETLINK_SOCK_DIAG: Final = 4
_SOCK_DIAG_BY_FAMILY: Final = 20
_NLMSG_ERROR: Final = 2
_NLMSG_DONE: Final = 3
_NLM_F_REQUEST_DUMP: Final = 0x1 | 0x300
_IPPROTO_TCP: Final = 6
_NLMSG = struct.Struct("=IHHII")
_DIAG_REQ = struct.Struct("=BBBBI48x")  # family, protocol, ext, pad, states, an empty sockid
_SPORT = struct.Struct(">H")  # inet_diag_msg: family, state, timer, retrans, then sockid.sport
# ... then the rest of sockid (46 bytes), expires, rqueue, wqueue, uid, and the socket's inode.
_INODE = struct.Struct("=I")
_INODE_AT: Final = 4 + 48 + 16


LISTENING: Final = 1 << 0x0A
"""The sock_diag state mask of listening sockets."""


def holding_states(*, time_wait: bool = False) -> int:
    """The sock_diag state mask of the states `ports_in_use` counts."""
    codes = _HOLDING | {_TIME_WAIT} if time_wait else _HOLDING
    return sum(1 << int(c, 16) for c in codes)


def sock_diag_request(family: int, states: int, seq: int) -> bytes:
    """A netlink dump request for the TCP sockets of `family` in `states`."""
    body = _DIAG_REQ.pack(family, _IPPROTO_TCP, 0, 0, states)
    return (
        _NLMSG.pack(_NLMSG.size + len(body), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST_DUMP, seq, 0)
        + body
    )


class DiagError(ValueError):
    """The kernel answered a dump with an error (or bytes that are no netlink messages)."""


def sock_diag_ports(
    datagram: bytes, ports: set[int], inodes: dict[int, set[int]] | None = None
) -> bool:
    """Add the local ports of one netlink answer to `ports` (and, given `inodes`, each port's
    socket inodes to it); True once the dump is done."""
    off = 0
    while off + _NLMSG.size <= len(datagram):
        length, kind, _, _, _ = _NLMSG.unpack_from(datagram, off)
        if length < _NLMSG.size or off + length > len(datagram):
            raise DiagError(f"a netlink message of {length} bytes at {off}")
        if kind == _NLMSG_DONE:
            return True
        if kind == _NLMSG_ERROR:
            raise DiagError("the kernel refused the sock_diag dump")
        if kind == _SOCK_DIAG_BY_FAMILY and length >= _NLMSG.size + 4 + _SPORT.size:
            port = _SPORT.unpack_from(datagram, off + _NLMSG.size + 4)[0]
            ports.add(port)
            if inodes is not None and length >= _NLMSG.size + _INODE_AT + _INODE.size:
                inode = _INODE.unpack_from(datagram, off + _NLMSG.size + _INODE_AT)[0]
                inodes.setdefault(port, set()).add(inode)
        off += (length + 3) & ~3
    return False
