"""Opening a path a caller named, for the command line's own files (a saved plan, a hardware
file, emitted units read back, ``--log-file``): never blocking, regular files only; writing
only inside a directory (``emit --out``); where paths resolve (what emit judges).

``open(2)`` of a FIFO blocks until the other end opens, and Python retries it after every
signal whose handler returns: a FIFO named like a plan would hang the command for good. Every
open here is ``O_NONBLOCK`` (a FIFO opens at once, or fails), then the file is judged by
``fstat`` and refused unless it is a regular file (a FIFO, a socket, ``/dev/zero``), as the
model and config paths are (`exedra_engine._shell.local.host.LocalHost.open_file`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable
from typing import BinaryIO

from exedra_engine._shell.local.ports import NotRegularFile

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


def write_inside(directory: str, name: str, data: bytes, mode: int = 0o644) -> None:
    """Write `name` in `directory` and nowhere else: into a new file (``O_EXCL``, never a
    link followed), renamed over the old one, which is replaced, not written through (a
    symbolic or hard link to a file outside is not touched). Mode 0644 by default (units,
    no secrets); 0600 for a file that may hold what only its owner should read."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
        os.replace(tmp, os.path.join(directory, name))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_cache_entry(entry: str, data: bytes) -> None:
    """Write a cache entry atomically (a private directory made as needed, a new file renamed
    over the old); a cache that cannot be written is not an error: the next run asks
    again."""
    import tempfile

    directory = os.path.dirname(entry)
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, entry)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass  # a read-only home


def real_paths(paths: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """(path, where it resolves on this machine) for each absolute path of `paths` and each
    directory above it that is or passes through a link; the first 256 paths. A path absent
    here resolves as far as it exists (a plan for another host)."""
    from exedra_engine._core.plan.load_files import normal_path

    out: dict[str, str] = {}
    for p in sorted({x for x in paths if x.startswith("/") and "\0" not in x})[:256]:
        at = normal_path(p)
        while at not in out and at != "/":
            real = os.path.realpath(at)
            if real != at:
                out[at] = real
            at = at.rsplit("/", 1)[0] or "/"
    return tuple(sorted(out.items()))
