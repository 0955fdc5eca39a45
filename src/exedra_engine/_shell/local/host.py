"""The real host adapter: `HostFiles` and `HostProcess` on this machine's file system.

`LocalHost(root)` can be rooted at any directory, so the same code reads fixture trees in
tests; paths it is given and returns are host paths ("/sys/class/drm"), never rooted ones.
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import BinaryIO

from exedra_engine._core.host.netstat import (
    LISTENING,
    NETLINK_SOCK_DIAG,
    DiagError,
    sock_diag_ports,
    sock_diag_request,
)
from exedra_engine._shell.local.ports import FileKind, NotRegularFile

_MAX_TEXT = 1 << 20


class LocalHost:
    """Reads files under `root` (default "/"). Never writes, never changes the environment."""

    def __init__(
        self, root: str = "/", *, path_env: str | None = None, affinity: int | None = None
    ) -> None:
        self.root = os.path.abspath(root)
        self._path_env = path_env
        self._affinity = affinity

    def _on_disk(self, path: str) -> str:
        if self.root == "/":
            return path  # relative PATH entries stay relative to the working directory
        return os.path.join(self.root, path.lstrip("/"))

    def _to_host(self, disk_path: str) -> str:
        if self.root == "/":
            return disk_path
        rel = os.path.relpath(disk_path, self.root)
        return "/" + rel if not rel.startswith("..") else disk_path

    def read_text(self, path: str) -> str | None:
        try:
            # O_NONBLOCK: sysfs and procfs files never block, but a FIFO planted where one is
            # expected must not hang a probe.
            fd = os.open(self._on_disk(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                return f.read(_MAX_TEXT).decode("utf-8", errors="replace")
        except OSError:
            return None

    def list_dir(self, path: str) -> tuple[str, ...] | None:
        try:
            return tuple(sorted(os.listdir(self._on_disk(path))))
        except OSError:
            return None

    def read_link(self, path: str) -> str | None:
        try:
            return os.readlink(self._on_disk(path))
        except OSError:
            return None

    def real_path(self, path: str) -> str:
        return self._to_host(os.path.realpath(self._on_disk(path)))

    def is_executable(self, path: str) -> bool:
        disk = self._on_disk(path)
        try:
            st = os.stat(disk)
        except OSError:
            return False
        return stat.S_ISREG(st.st_mode) and os.access(disk, os.X_OK)

    def file_kind(self, path: str) -> FileKind:
        try:
            mode = os.stat(self._on_disk(path)).st_mode
        except FileNotFoundError:
            return "missing"
        except NotADirectoryError:
            return "missing"  # a path through a regular file names nothing
        if stat.S_ISREG(mode):
            return "file"
        return "directory" if stat.S_ISDIR(mode) else "other"

    def exists(self, path: str) -> bool:
        return os.path.lexists(self._on_disk(path))

    def open_file(self, path: str) -> tuple[BinaryIO, int]:
        # O_NONBLOCK: a FIFO named like a model or a config file must not hang the caller.
        fd = os.open(self._on_disk(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(21, "is a directory", path)
            raise NotRegularFile(0, "not a regular file", path)
        return os.fdopen(fd, "rb", buffering=0), st.st_size

    def tcp_ports(self, states: int) -> frozenset[int] | None:
        dumped = self._dump(states)
        return None if dumped is None else frozenset(dumped)

    def listener_inodes(self, port: int) -> frozenset[int] | None:
        """The inodes of the sockets listening on TCP `port`, or None when the kernel cannot
        be asked."""
        dumped = self._dump(LISTENING)
        return None if dumped is None else frozenset(dumped.get(port, ()))

    def _dump(self, states: int) -> dict[int, set[int]] | None:
        """Local ports of this network namespace's TCP sockets in `states` (a sock_diag
        mask), each with its sockets' inodes, by one netlink dump per address family; None
        where netlink is unavailable (the caller then reads /proc/net/tcp). Only for the host
        itself: a rooted `LocalHost` reads fixture files instead."""
        if self.root != "/":
            return None
        try:
            # _socket, not socket: the wrapper builds its enums at import (~3 ms of a plan's
            # cold start), and a dump needs none of them.
            import _socket

            s = _socket.socket(
                _socket.AF_NETLINK, _socket.SOCK_DGRAM | _socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG
            )
            try:
                s.settimeout(2.0)
                ports: set[int] = set()
                inodes: dict[int, set[int]] = {}
                for seq, family in enumerate((_socket.AF_INET, _socket.AF_INET6), 1):
                    s.send(sock_diag_request(family, states, seq))
                    while not sock_diag_ports(s.recv(1 << 16), ports, inodes):
                        pass
                return {p: inodes.get(p, set()) for p in ports}
            finally:
                s.close()
        except (OSError, AttributeError, DiagError):
            return None

    def socket_inodes(self, pid: int) -> frozenset[int] | None:
        """The inodes of the sockets process `pid` holds open, or None when its file
        descriptors cannot be listed."""
        fd_dir = self._on_disk(f"/proc/{pid}/fd")
        try:
            names = os.listdir(fd_dir)
        except OSError:
            return None
        inodes = set()
        for n in names:
            with contextlib.suppress(OSError):
                target = os.readlink(os.path.join(fd_dir, n))
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
        return frozenset(inodes)

    def affinity_cpus(self) -> int:
        if self._affinity is not None:
            return self._affinity
        try:
            return len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            return os.cpu_count() or 1

    def search_path(self) -> tuple[str, ...]:
        raw = os.environ.get("PATH", os.defpath) if self._path_env is None else self._path_env
        dirs = (d for d in raw.split(os.pathsep) if d)
        # A plan's command must not depend on the directory it is launched from.
        return tuple(os.path.abspath(d) if self.root == "/" else d for d in dirs)
