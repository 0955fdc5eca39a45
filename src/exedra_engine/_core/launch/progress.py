"""A model load's progress, from bytes: how much of the files the plan loads the executor has
brought in, as a fraction, the 10 % steps a log line is printed at, and a terminal bar. Pure:
the bytes are measured by `exedra_engine._shell.load_progress` (and by whatever an embedder
plugs in).

What is measured is the executor's own intake of the model, not a guess from the time: the
resident pages of its mappings of the plan's files (llama.cpp maps a GGUF and populates the
mapping while it loads) or the bytes it has read through ``read(2)`` (``--no-mmap``, and
whisper.cpp, which reads its model), whichever is larger, against the sum of the sizes the plan
gives its files (`LaunchPlan.files`)."""

from __future__ import annotations

from typing import Final

from exedra_engine._core.struct import Value

STEP: Final = 10
"""Percent between two lines of a log that is no terminal."""
SHOW_AFTER: Final = 2.0
"""Seconds of loading before any progress is shown: a quicker load needs none."""


class LoadProgress(Value, frozen=True, kw_only=True):
    """One sample of a load: the bytes of the model brought in so far, of `total`."""

    done: int
    """Bytes of the plan's files the executor has mapped in or read."""
    total: int
    """Bytes the plan expects it to load (0: unknown, then only the time is told)."""
    elapsed: float
    """Seconds since the executor was started."""
    measure: str = ""
    """How `done` was measured (``mapped``, ``read``), for people and for logs."""

    @property
    def fraction(self) -> float:
        """`done` of `total`, from 0.0 to 1.0 (0.0 while the total is unknown)."""
        return fraction(self.done, self.total)

    @property
    def percent(self) -> int:
        """The fraction in whole percent, rounded down (100 only once all is in)."""
        return int(self.fraction * 100)


def fraction(done: int, total: int) -> float:
    """`done` of `total`, clamped to 0.0..1.0; 0.0 when `total` is not known."""
    if total <= 0:
        return 0.0
    return min(1.0, max(0.0, done / total))


def step(percent: int, every: int = STEP) -> int:
    """The last step of `every` percent that `percent` has reached (0, 10, ... 100)."""
    return max(0, min(100, percent)) // every * every


def new_step(last: int | None, p: LoadProgress, every: int = STEP) -> int | None:
    """The step to print a line for, when `p` has reached one past `last` (None: none yet
    printed, then the first line is whatever step the load has reached); else None."""
    if p.total <= 0:
        return None
    now = step(p.percent, every)
    return now if last is None or now > last else None


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


def progress_line(p: LoadProgress) -> str:
    """One line of a load: ``40 % of 3.1 GiB (1.2 GiB mapped), 12 s``."""
    if p.total <= 0:
        return f"{p.elapsed:.0f} s, size unknown"
    how = f" {p.measure}" if p.measure else ""
    return f"{p.percent:3d} % of {_size(p.total)} ({_size(p.done)}{how}), {p.elapsed:.0f} s"


def bar(p: LoadProgress, width: int = 24) -> str:
    """A terminal bar: ``[#########...............]  40 % of 3.1 GiB (...), 12 s``."""
    filled = round(p.fraction * width)
    return "[" + "#" * filled + "." * (width - filled) + "]  " + progress_line(p)


def mapped_bytes(smaps: str, paths: frozenset[str]) -> int:
    """Resident bytes of the mappings of `paths` in a ``/proc/PID/smaps`` text (each mapping's
    ``Rss:``); pages of the model the executor has brought into its address space."""
    total, counting = 0, False
    for line in smaps.splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
            counting = len(head) == 6 and head[5] in paths
        elif counting and line.startswith("Rss:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                total += int(parts[1]) * 1024
    return total


def read_bytes(io: str) -> int:
    """Bytes read through ``read(2)`` and the like, from a ``/proc/PID/io`` text (``rchar``:
    the model's bytes when it is read, not mapped); 0 when absent."""
    for line in io.splitlines():
        key, _, value = line.partition(":")
        if key == "rchar" and value.strip().isdigit():
            return int(value)
    return 0
