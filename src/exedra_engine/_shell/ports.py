"""The effect ports: the small interfaces behind which every host read sits.

The pure core never calls these; the shells (`probe`, `inspect`, `load_config`, `plan`) do,
through an adapter. `LocalHost` in `exedra_engine._shell.host` is the real one; tests root it at a
fixture tree.
"""

from __future__ import annotations

from typing import Protocol


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


class HostProcess(Protocol):
    """Facts about the calling process."""

    def affinity_cpus(self) -> int:
        """How many CPUs this process may run on."""
        ...

    def search_path(self) -> tuple[str, ...]:
        """The directories of PATH, in order."""
        ...
