"""The effect ports: the small interfaces behind which every host read sits.

The pure core never calls these; the shells (`probe`, `inspect`, `load_config`, `plan`) do,
through one adapter, so a test can hand them a dict-backed fake instead of a disk tree.
`LocalHost` in `exedra_engine._shell.local.host` is the real one; tests root it at fixture trees.
"""

from __future__ import annotations

from typing import BinaryIO, Literal, Protocol, runtime_checkable

FileKind = Literal["missing", "file", "directory", "other"]
"""What a path names: nothing, a regular file, a directory, or anything else (a FIFO, a
socket, a device)."""


class NotRegularFile(OSError):
    """Raised by `HostFiles.open_file` for a path that is not a regular file."""


class HostFiles(Protocol):
    """Read-only access to the host's files, addressed by absolute host paths."""

    def read_text(self, path: str) -> str | None:
        """A small text file's contents, or None when it cannot be read."""
        ...

    def list_dir(self, path: str) -> tuple[str, ...] | None:
        """Entry names of a directory, sorted, or None when it cannot be listed."""
        ...

    def read_link(self, path: str) -> str | None:
        """A symbolic link's target, or None when `path` is not a link."""
        ...

    def real_path(self, path: str) -> str:
        """`path` with every link resolved, as a host path."""
        ...

    def is_executable(self, path: str) -> bool:
        """Whether `path` is a regular file this process may execute."""
        ...

    def file_kind(self, path: str) -> FileKind:
        """What `path` names, links followed. Raises `OSError` when that cannot be told
        (no permission, a name too long, a loop of links): only "missing" means absent."""
        ...

    def exists(self, path: str) -> bool:
        """Whether anything, a dangling link included, is at `path`."""
        ...

    def open_file(self, path: str) -> tuple[BinaryIO, int]:
        """A regular file opened for reading, and its size; it never blocks on a FIFO.
        Raises `OSError`: `FileNotFoundError`, `IsADirectoryError`, `NotRegularFile`."""
        ...


class HostProcess(Protocol):
    """Facts about the calling process."""

    def affinity_cpus(self) -> int:
        """How many CPUs this process may run on."""
        ...

    def search_path(self) -> tuple[str, ...]:
        """The directories of PATH, in order."""
        ...


@runtime_checkable
class HostSockets(Protocol):
    """The host's TCP sockets, asked of the kernel (an optional port: without it, the ports
    in use are read from /proc/net/tcp through `HostFiles`)."""

    def tcp_ports(self, states: int) -> frozenset[int] | None:
        """Local ports of TCP sockets in `states` (a sock_diag state mask), or None when
        the kernel cannot be asked."""
        ...


class Host(HostFiles, HostProcess, Protocol):
    """Both ports in one object, as `LocalHost` (and the tests' in-memory host) provide."""


class ProcessSockets(Protocol):
    """Which process listens on a port: asked of the kernel, so that a 200 from a stranger
    that took an executor's port does not make its launch ready (`LocalHost` is the real one)."""

    def listener_inodes(self, port: int) -> frozenset[int] | None:
        """The inodes of the sockets listening on TCP `port`, or None when the kernel cannot
        be asked."""
        ...

    def socket_inodes(self, pid: int) -> frozenset[int] | None:
        """The inodes of the sockets process `pid` holds open, or None when its descriptors
        cannot be listed."""
        ...

    def read_text(self, path: str) -> str | None:
        """A small text file's contents (``/proc/PID/stat``), or None when unreadable."""
        ...
