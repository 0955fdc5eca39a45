"""The sampler behind a load's progress: how many bytes of the plan's files a starting executor
has brought in, read from ``/proc/PID/smaps`` (the resident pages of its mappings of those files)
and ``/proc/PID/io`` (``rchar``, for a model read rather than mapped), whichever is larger. The
arithmetic is pure (`exedra_engine._core.launch.progress`); this reads, through a port.

Why these and not the executor's log: llama-server says nothing while ``mmap`` populates a
mapping (``MAP_POPULATE``, the bulk of a cold load), and its loading dots depend on its log
level; the kernel's counts move with the bytes themselves, for any executor."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from exedra_engine._core.launch.progress import LoadProgress, mapped_bytes, read_bytes
from exedra_engine._core.plan.launch_plan import LaunchPlan

ReadText = Callable[[str], "str | None"]
"""The port: a small text file's contents (``/proc/PID/smaps``), None when unreadable."""


def read_proc(path: str) -> str | None:
    """`ReadText` on this host's /proc."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def plan_files(plan: LaunchPlan) -> tuple[frozenset[str], int]:
    """The real paths of the files the plan loads, and the bytes it expects them to be."""
    paths = frozenset(os.path.realpath(f.path) for f in plan.files if f.path)
    return paths, sum(f.size for f in plan.files)


class Sampler:
    """Samples the load of one process: ``sample(elapsed)`` gives a `LoadProgress`."""

    def __init__(
        self, pid: int, paths: Iterable[str], total: int, read: ReadText = read_proc
    ) -> None:
        self.pid = pid
        self.paths = frozenset(paths)
        self.total = total
        self._read = read
        self._rchar0: int | None = None
        self._done = 0

    def sample(self, elapsed: float) -> LoadProgress:
        """The bytes brought in so far (0 while /proc cannot be read: a process gone, or
        another user's)."""
        mapped = mapped_bytes(self._read(f"/proc/{self.pid}/smaps") or "", self.paths)
        rchar = read_bytes(self._read(f"/proc/{self.pid}/io") or "")
        if self._rchar0 is None:
            self._rchar0 = rchar  # what the process read before (its libraries): not the model
        read = max(0, rchar - self._rchar0)
        done, measure = (mapped, "mapped") if mapped >= read else (read, "read")
        # Progress never goes back: a page of the mapping reclaimed, or the warm-up's own
        # reads, move the counts a little either way once all is in.
        self._done = max(self._done, done)
        return LoadProgress(done=self._done, total=self.total, elapsed=elapsed, measure=measure)


def child_running(command: str, parent: int | None = None, read: ReadText = read_proc) -> int:
    """The pid of a child of `parent` (this process by default) running `command`, 0 when
    none is yet: how the command line finds the executor it is starting, to sample it."""
    me = os.getpid() if parent is None else parent
    real = os.path.realpath(command)
    tasks = f"/proc/{me}/task"
    try:
        names = os.listdir(tasks)
    except OSError:
        return 0
    for tid in names:
        for word in (read(f"{tasks}/{tid}/children") or "").split():
            try:
                exe = os.readlink(f"/proc/{word}/exe")
            except OSError:
                continue
            if exe in (real, command):
                return int(word)
    return 0


class ProgressFeed:
    """The event stream for embedders: given the pid of the executor being loaded and the
    time since it started, at each tick of the readiness wait, it calls `on_progress` with a
    `LoadProgress` (a new sampler when the pid changes: a port retry starts a new process)."""

    def __init__(
        self,
        plan: LaunchPlan,
        on_progress: Callable[[LoadProgress], object],
        read: ReadText = read_proc,
    ) -> None:
        self.paths, self.total = plan_files(plan)
        self._on = on_progress
        self._read = read
        self._sampler: Sampler | None = None

    def tick(self, pid: int, elapsed: float) -> LoadProgress:
        """Sample the load of `pid` now, pass the sample on, and return it."""
        if self._sampler is None or self._sampler.pid != pid:
            self._sampler = Sampler(pid, self.paths, self.total, self._read)
        p = self._sampler.sample(elapsed)
        self._on(p)
        return p
