"""Opening a path a caller named, for the command line's own files (a saved plan, a hardware
file, emitted units read back, ``--log-file``): never blocking, regular files only.

``open(2)`` of a FIFO blocks until the other end opens, and Python retries it after every
signal whose handler returns: a FIFO named like a plan would hang the command for good. Every
open here is ``O_NONBLOCK`` (a FIFO opens at once, or fails), then the file is judged by
``fstat`` and refused unless it is a regular file (a FIFO, a socket, ``/dev/zero``), as the
model and config paths are (`exedra_engine._shell.host.LocalHost.open_file`).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

from exedra_engine._shell.ports import NotRegularFile

_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


def _regular(fd: int, path: str) -> None:
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return
    os.close(fd)
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(21, "is a directory", path)
    what = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if _is_device(mode) else "a socket"
    raise NotRegularFile(0, f"not a regular file ({what})", path)


def _is_device(mode: int) -> bool:
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode)


def read_regular(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], limit: int) -> bytes:
    """Up to `limit` + 1 bytes of the regular file `path` (one more than `limit` tells the
    caller it is larger). Raises `OSError`: `NotRegularFile` (its ``strerror`` says what the
    path is), `IsADirectoryError`, or the open's own."""
    fd = os.open(path, _READ)
    _regular(fd, os.fsdecode(path))
    with os.fdopen(fd, "rb") as f:
        return f.read(limit + 1)


def open_append(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes], mode: int = 0o600
) -> BinaryIO:
    """The regular file `path` opened to append to, made with `mode` (0600: a log holds what
    the executor prints, a key's last characters included) when absent. A FIFO with no
    reader fails at once (``ENXIO``); one with a reader, and a device, are refused."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags, mode)
    except OSError as e:
        if e.errno == errno.ENXIO:  # a FIFO no one reads
            raise NotRegularFile(0, "not a regular file (a FIFO)", os.fsdecode(path)) from None
        raise
    _regular(fd, os.fsdecode(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab")
