"""The processes one executor started, found and signalled wherever they went: the
`ProcessTree` port and its Linux implementation, `LocalTree`.

An executor runs in its own session and process group, so ``killpg`` reaches what it forks.
A helper that calls ``setsid`` (``setsid sleep 120 &``; servers that daemonise a helper do
this) leaves the group and the session, holds the log pipe open, and used to survive every
stop. Two things find it again:

- This process is a child subreaper (``PR_SET_CHILD_SUBREAPER``) while any executor runs: an
  orphan of the executor's tree is re-parented to us, not to init, so it stays a descendant
  of this process and is reaped by us (never left a zombie).
- Every executor's environment carries a marker, ``EXEDRA_ENGINE_INSTANCE``, unique per
  launch, which its descendants inherit. A walk of /proc (parent links) from the leader, from
  the group, from every process seen in an earlier walk, and from each of our direct children
  that carries the marker, gives the whole tree, also once the leader has exited.

Why not a cgroup: a cgroup holds every descendant for certain, but creating one needs a
writable, delegated cgroup v2 subtree, which a library cannot count on (containers, CI
runners, SSH sessions without a systemd user slice; this project's own build host has a
read-only v1 hierarchy). The subreaper needs no privilege on any Linux since 3.4.

The subreaper is process-wide: while an executor runs, an orphan of any other child of this
process comes to us too. Only the processes attributed to an executor are ever reaped here
(by pid, ``waitpid(pid, WNOHANG)``, never ``waitpid(-1)``, which would steal the exit of a
caller's own `subprocess.Popen`), and the flag is cleared again when the last executor's tree
is gone. A helper that both scrubs its environment and escapes before any walk saw it is not
found: the log pipe's drain is bounded for that case (`PIPE_DRAIN`), so it can hold nothing
up.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import threading
from collections.abc import Iterable
from typing import Final, NamedTuple, Protocol

from exedra_engine._core.launch.child import ChildSpec
from exedra_engine._shell.launch import child

MARKER: Final = "EXEDRA_ENGINE_INSTANCE"
"""The variable that marks an executor's environment (and its descendants')."""

PIPE_DRAIN: Final = 1.0
"""How long the output pipe may stay open once the tree is gone (a process that escaped
both the walk and the marker could hold it for ever)."""

_PR_SET_CHILD_SUBREAPER: Final = 36


class ProcessTree(Protocol):
    """Every process one executor started (its group, and those that left it)."""

    def signal(self, name: str) -> None:
        """Send signal `name` (``SIGTERM``) to the executor's group and to every process of
        its tree outside the group; processes already gone are not an error."""
        ...

    def alive(self) -> bool:
        """Whether any process of the tree besides the leader is left (the leader's own exit
        is the adapter's to see). Reaps the tree's orphans that came to us as they die."""
        ...

    def peak_rss(self) -> int | None:
        """The summed peak resident memory of the tree's processes, bytes; None when /proc
        cannot tell. Scans /proc: call it off the event loop."""
        ...

    def release(self) -> None:
        """The tree is done with (gone, or given up on): drop its hold on the subreaper."""
        ...


class _Subreaper:
    """``PR_SET_CHILD_SUBREAPER`` held while at least one executor's tree is live."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0

    def acquire(self) -> None:
        with self._lock:
            if self._holders == 0:
                _set_subreaper(1)
            self._holders += 1

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders == 0:
                _set_subreaper(0)


def _set_subreaper(on: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, on, 0, 0, 0)


SUBREAPER: Final = _Subreaper()


class Stat(NamedTuple):
    """What /proc/PID/stat says of one process, as far as the walk needs it."""

    pid: int
    state: str
    ppid: int
    pgrp: int
    start: int
    """Its start time (clock ticks since boot): a pid reused by another process differs."""


def read_stats() -> dict[int, Stat]:
    """Every process of this host, by pid (one pass over /proc)."""
    out: dict[int, Stat] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        stat = parse_stat(int(name), raw)
        if stat is not None:
            out[stat.pid] = stat
    return out


def parse_stat(pid: int, raw: bytes) -> Stat | None:
    """/proc/PID/stat's fields past the command name (which may hold spaces and parens)."""
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return Stat(pid, fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def descendants(roots: Iterable[int], stats: dict[int, Stat]) -> set[int]:
    """`roots` (those that exist) and every process below them by parent links."""
    children: dict[int, list[int]] = {}
    for s in stats.values():
        children.setdefault(s.ppid, []).append(s.pid)
    found: set[int] = set()
    todo = [r for r in roots if r in stats]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def _marked(pid: int, marker: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


class LocalTree:
    """`ProcessTree` on this host's /proc, for the executor whose leader is `leader`."""

    def __init__(self, leader: int, marker: str) -> None:
        self.leader = leader
        self._marker = f"{MARKER}={marker}".encode()
        self._seen: dict[int, int] = {}
        """Processes of the tree seen by an earlier walk: pid to start time."""
        self._released = False

    def members(self) -> dict[int, Stat]:
        """The tree's processes now, the leader excluded (remembered for later walks)."""
        stats = read_stats()
        me = os.getpid()
        roots = {self.leader}
        roots.update(p for p, s in stats.items() if s.pgrp == self.leader)
        roots.update(p for p, t in self._seen.items() if p in stats and stats[p].start == t)
        roots.update(
            p
            for p, s in stats.items()
            if s.ppid == me and p not in roots and _marked(p, self._marker)
        )
        found = {p: stats[p] for p in descendants(roots, stats) if p != self.leader}
        self._seen.update((p, s.start) for p, s in found.items())
        return found

    def signal(self, name: str) -> None:
        sig = signal.Signals[name]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.leader, sig)
        for pid, s in self.members().items():
            if s.pgrp != self.leader:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)

    def alive(self) -> bool:
        me = os.getpid()
        left = False
        for pid, s in self.members().items():
            if s.state != "Z":
                left = True
            elif s.ppid == me:
                # An orphan of the tree, re-parented to us (the subreaper): ours to reap. A
                # zombie of any other parent is that parent's, and holds nothing.
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        return left

    def peak_rss(self) -> int | None:
        total, seen = 0, False
        for pid in {self.leader, *self.members()}:
            try:
                with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            total += int(line.split()[1]) * 1024
                            seen = True
                            break
            except (OSError, ValueError):
                continue
        return total if seen else None

    def release(self) -> None:
        if not self._released:
            self._released = True
            SUBREAPER.release()


Started = tuple[subprocess.Popen[bytes], int, ProcessTree]
"""A started child: the process, the read end of its output pipe, its tree."""


def start(spec: ChildSpec) -> Started:
    """Start `spec` (`child.spawn`) as the root of a tree: marked, with the subreaper held
    until `LocalTree.release`. The process, the read end of its output pipe, its tree.
    Blocks for the fork; raises `OSError`."""
    spec, marker = marked(spec)
    SUBREAPER.acquire()
    try:
        popen, read = child.spawn(spec)
    except BaseException:
        SUBREAPER.release()
        raise
    return popen, read, LocalTree(popen.pid, marker)


def marked(spec: ChildSpec) -> tuple[ChildSpec, str]:
    """`spec` with a fresh marker in its environment, and the marker."""
    marker = secrets.token_hex(8)
    env = (*((k, v) for k, v in spec.env if k != MARKER), (MARKER, marker))
    return ChildSpec(
        argv=spec.argv, env=env, new_session=spec.new_session, death_signal=spec.death_signal
    ), marker
