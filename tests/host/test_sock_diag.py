"""The ports in use by netlink sock_diag agree with /proc/net/tcp{,6}, on this machine's real
sockets: listening and in TIME_WAIT, over IPv4 and IPv6. (A socket bound but not listening is
in neither: the kernel lists only its listening and connection tables.)"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import pytest

from exedra_engine._core.host.netstat import (
    DiagError,
    holding_states,
    ports_in_use,
    sock_diag_ports,
    sock_diag_request,
)
from exedra_engine._shell.local.host import LocalHost


@pytest.fixture
def sockets() -> Iterator[dict[str, int]]:
    held: list[socket.socket] = []

    def new(family: socket.AddressFamily, host: str) -> socket.socket:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.bind((host, 0))
        held.append(s)
        return s

    listen4 = new(socket.AF_INET, "127.0.0.1")
    listen4.listen()
    listen6 = new(socket.AF_INET6, "::1")
    listen6.listen()
    # TIME_WAIT stays with the side that closes first: the client here.
    server = new(socket.AF_INET, "127.0.0.1")
    server.listen()
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    local_port = client.getsockname()[1]
    client.close()
    accepted.close()
    time.sleep(0.05)
    try:
        yield {
            "listen4": listen4.getsockname()[1],
            "listen6": listen6.getsockname()[1],
            "time_wait": local_port,
        }
    finally:
        for s in held:
            s.close()


def _proc(time_wait: bool) -> frozenset[int]:
    texts = []
    for p in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(p) as f:
            texts.append(f.read())
    return ports_in_use(*texts, time_wait=time_wait)


@pytest.mark.parametrize("time_wait", [False, True])
def test_netlink_agrees_with_proc(sockets: dict[str, int], time_wait: bool) -> None:
    dumped = LocalHost().tcp_ports(holding_states(time_wait=time_wait))
    assert dumped is not None, "netlink sock_diag is unavailable here"
    proc = _proc(time_wait)
    for ports in (dumped, proc):
        assert {sockets["listen4"], sockets["listen6"]} <= ports
        assert (sockets["time_wait"] in ports) == time_wait
    # Other processes' connections come and go between the two reads: only ephemeral ports
    # (a client's side, never a server's) may differ.
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    assert all(p >= low for p in dumped ^ proc), sorted(dumped ^ proc)


def test_a_rooted_host_reads_its_files_not_the_kernel() -> None:
    assert LocalHost("/tmp").tcp_ports(holding_states()) is None


def ports_from_dumps(datagrams: list[bytes]) -> frozenset[int]:
    ports: set[int] = set()
    for d in datagrams:
        sock_diag_ports(d, ports)
    return frozenset(ports)


def test_the_request_and_a_hostile_answer() -> None:
    req = sock_diag_request(socket.AF_INET, holding_states(), 7)
    length, kind, flags, seq, _ = struct.unpack_from("=IHHII", req)
    assert (length, kind, flags & 0x301, seq) == (len(req), 20, 0x301, 7) and len(req) == 72
    done = struct.pack("=IHHII", 20, 3, 0, 7, 0) + b"\0" * 4
    msg = struct.pack("=IHHII", 16 + 72, 20, 2, 7, 0) + struct.pack("=BBBB", 2, 10, 0, 0)
    msg += struct.pack(">H", 18080) + b"\0" * 66
    assert ports_from_dumps([msg + done]) == frozenset({18080})
    with pytest.raises(DiagError):  # a length that runs past the datagram
        ports_from_dumps([struct.pack("=IHHII", 9999, 20, 2, 7, 0)])
    with pytest.raises(DiagError):  # the kernel's error answer
        ports_from_dumps([struct.pack("=IHHII", 20, 2, 0, 7, 0) + b"\xff" * 4])
