"""A dict-backed `HostFiles` and `HostProcess`: the shells' tests run on it without a disk tree.

Files are given as ``{path: bytes | str}``; directories are every parent of a file, plus
`dirs`; `special` paths are FIFOs, sockets or devices ("other"); `links` are symbolic links.
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Iterable, Mapping
from typing import BinaryIO

from exedra_engine._shell.local.ports import FileKind, NotRegularFile


class MemoryHost:
    def __init__(
        self,
        files: Mapping[str, bytes | str] = {},
        *,
        dirs: Iterable[str] = (),
        special: Iterable[str] = (),
        links: Mapping[str, str] = {},
        executables: Iterable[str] = (),
        path_env: str = "/usr/bin",
        affinity: int = 2,
    ) -> None:
        self.files = {p: (v.encode() if isinstance(v, str) else v) for p, v in files.items()}
        self.special = frozenset(special)
        self.links = dict(links)
        self.executables = frozenset(executables)
        self.path_env = path_env
        self.affinity = affinity
        self.dirs = {"/", *dirs}
        for p in [*self.files, *self.special, *self.links, *self.dirs]:
            while p not in ("/", ""):
                p = posixpath.dirname(p)
                self.dirs.add(p)
        self.opened: list[str] = []
        """Every path `open_file` was asked for, in order."""

    def _resolve(self, path: str) -> str:
        seen = 0
        while path in self.links:
            target = self.links[path]
            path = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
            seen += 1
            if seen > 40:
                raise OSError(40, "Too many levels of symbolic links", path)
        return path

    def read_text(self, path: str) -> str | None:
        data = self.files.get(self._resolve(path))
        return None if data is None else data.decode("utf-8", errors="replace")

    def list_dir(self, path: str) -> tuple[str, ...] | None:
        path = self._resolve(path)
        if path not in self.dirs:
            return None
        names = {
            posixpath.basename(p)
            for p in [*self.files, *self.special, *self.links, *self.dirs]
            if p != path and posixpath.dirname(p) == path
        }
        return tuple(sorted(names))

    def read_link(self, path: str) -> str | None:
        return self.links.get(path)

    def real_path(self, path: str) -> str:
        return self._resolve(path)

    def is_executable(self, path: str) -> bool:
        return self._resolve(path) in self.executables

    def file_kind(self, path: str) -> FileKind:
        path = self._resolve(path)
        if path in self.files:
            return "file"
        if path in self.dirs:
            return "directory"
        return "other" if path in self.special else "missing"

    def exists(self, path: str) -> bool:
        return path in self.links or self.file_kind(path) != "missing"

    def open_file(self, path: str) -> tuple[BinaryIO, int]:
        self.opened.append(path)
        kind = self.file_kind(path)
        if kind == "missing":
            raise FileNotFoundError(2, "No such file or directory", path)
        if kind == "directory":
            raise IsADirectoryError(21, "Is a directory", path)
        if kind == "other":
            raise NotRegularFile(0, "not a regular file", path)
        data = self.files[self._resolve(path)]
        return io.BytesIO(data), len(data)

    def affinity_cpus(self) -> int:
        return self.affinity

    def search_path(self) -> tuple[str, ...]:
        return tuple(d for d in self.path_env.split(":") if d)
