"""The processes one executor started, found and signalled wherever they went: the
`ProcessTree` port and its Linux implementation, `LocalTree`.

An executor runs in its own session and process group, so ``killpg`` reaches what it forks.
A helper that calls ``setsid`` (``setsid sleep 120 &``; servers that daemonise a helper do
this) leaves the group and the session, holds the log pipe open, and used to survive every
stop. Every executor's environment carries a marker, ``EXEDRA_ENGINE_INSTANCE``, unique per
launch, which its descendants inherit. A walk of /proc (parent links) from the leader while
it is not reaped, from its group, from every process seen in an earlier walk (pid and start
time), and from every process younger than the leader that carries the marker, gives the
whole tree, also once the leader has exited and its orphans went to init.

Why no child subreaper (``PR_SET_CHILD_SUBREAPER``, which this module once held while an
executor ran): it is process-wide, so every orphan of the embedding application's own
children came to us too, and stayed a zombie for the application's life (50 ``sh -c 'sleep
0.05 &'`` in a group's block left 50). Reaping them is not possible safely: the kernel does
not say whether a zombie child was adopted or forked by the application itself, which still
waits for it (``waitpid`` on a `subprocess.Popen` then says 0). Without the flag an orphan of
the tree goes to init (or the nearest subreaper above), which reaps it; the marker finds it
as well as the parent link did, and nothing of the application's is ever adopted or reaped
here. Only tree processes that are our own children are reaped (by pid, ``waitpid(pid,
WNOHANG)``, never ``waitpid(-1)``): this process is init in a container, or a subreaper the
application set itself.

No signal goes to a pid that may be another process's: the leader's pid and its group's id
are used only while the leader is not reaped (until then neither can be reused). The
leader's exit is collected (`collect`) after one last walk from both, and from then on each
process of the tree is signalled through a pidfd, once its start time shows it is still the
process a walk saw.

Why not a cgroup: a cgroup holds every descendant for certain, but creating one needs a
writable, delegated cgroup v2 subtree, which a library cannot count on (containers, CI
runners, SSH sessions without a systemd user slice; this project's own build host has a
read-only v1 hierarchy). A helper that both scrubs its environment and escapes before any
walk saw it is not found: the log pipe's drain is bounded for that case (`PIPE_DRAIN`), so it
can hold nothing up.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
from collections.abc import Callable, Iterable
from typing import Final, NamedTuple, Protocol

from exedra_engine._core.launch.child import ChildSpec
from exedra_engine._shell.launch import child

MARKER: Final = "EXEDRA_ENGINE_INSTANCE"
"""The variable that marks an executor's environment (and its descendants')."""

PIPE_DRAIN: Final = 1.0
"""How long the output pipe may stay open once the tree is gone (a process that escaped
both the walk and the marker could hold it for ever)."""


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

    def leader_exited(self) -> None:
        """The leader has exited and is not reaped yet: the last walk that may start from
        its pid and its group (what it finds is remembered)."""
        ...

    def release(self) -> None:
        """The tree is done with (gone, or given up on): forget what the walks saw."""
        ...


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


def start_of(pid: int) -> int | None:
    """Process `pid`'s start time (`Stat.start`); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = parse_stat(pid, f.read())
    except OSError:
        return None
    return None if stat is None else stat.start


def send(pid: int, start: int, sig: int) -> None:
    """Signal `sig` to `pid` if it is still the process that started at `start`: through a
    pidfd, which names that one process, so a pid reused after the check is not reached."""
    try:
        fd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):
        fd = None  # a kernel before 5.3: the start time alone
    try:
        if start_of(pid) != start:
            return
        if fd is None:
            os.kill(pid, sig)
        else:
            signal.pidfd_send_signal(fd, sig)
    except (ProcessLookupError, PermissionError):
        pass
    finally:
        if fd is not None:
            os.close(fd)


class LocalTree:
    """`ProcessTree` on this host's /proc, for the executor whose leader is `leader`;
    `reaped` says whether the leader's exit has been collected (its pid free for reuse)."""

    def __init__(
        self, leader: int, marker: str, *, reaped: Callable[[], bool] = lambda: False
    ) -> None:
        self.leader = leader
        self._marker = f"{MARKER}={marker}".encode()
        self._reaped = reaped
        self._born = 0 if reaped() else start_of(leader) or 0
        """The leader's start time: a process of its tree cannot be older."""
        self._seen: dict[int, int] = {}
        """Processes of the tree seen by an earlier walk: pid to start time."""
        self._unmarked: set[tuple[int, int]] = set()
        """Processes (pid, start time) whose environment was read and holds no marker."""

    def _is_marked(self, pid: int, start: int) -> bool:
        if (pid, start) in self._unmarked:
            return False
        if _marked(pid, self._marker):
            return True
        self._unmarked.add((pid, start))
        return False

    def members(self) -> dict[int, Stat]:
        """The tree's processes now, the leader excluded while it is not reaped (remembered
        for later walks)."""
        stats = read_stats()
        leader, reaped = self.leader, self._reaped()
        roots: set[int] = set()
        if not reaped:  # its pid and group id are ours until the reap, and only until then
            roots.add(leader)
            roots.update(p for p, s in stats.items() if s.pgrp == leader)
        roots.update(p for p, t in self._seen.items() if p in stats and stats[p].start == t)
        roots.update(
            p
            for p, s in stats.items()
            if p not in roots and s.start >= self._born and self._is_marked(p, s.start)
        )
        found = {p: stats[p] for p in descendants(roots, stats) if reaped or p != leader}
        self._seen.update((p, s.start) for p, s in found.items())
        return found

    def leader_exited(self) -> None:
        self.members()

    def signal(self, name: str) -> None:
        sig = signal.Signals[name]
        reaped = self._reaped()
        if not reaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.leader, sig)
        for pid, s in self.members().items():
            if reaped or s.pgrp != self.leader:
                send(pid, s.start, sig)

    def alive(self) -> bool:
        me = os.getpid()
        left = False
        for pid, s in self.members().items():
            if s.state != "Z":
                left = True
            elif s.ppid == me:
                # A process of the tree that is our own child (this process is init, or a
                # subreaper by the application's choice): ours to reap. A zombie of any other
                # parent is that parent's, and holds nothing.
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
        return left

    def peak_rss(self) -> int | None:
        total, seen = 0, False
        pids = set(self.members())
        if not self._reaped():
            pids.add(self.leader)
        for pid in pids:
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
        self._seen.clear()
        self._unmarked.clear()


def collect(popen: subprocess.Popen[bytes], tree: ProcessTree) -> int | None:
    """The leader's exit status once it has exited, collected (reaped) after the last walk
    its pid allows (`ProcessTree.leader_exited`); None while it runs. Never blocks."""
    if popen.returncode is not None:
        return popen.returncode
    try:
        exited = os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # collected by someone else: Popen says what it can
        return popen.poll()
    if exited is None:
        return None
    tree.leader_exited()
    return popen.poll()


Started = tuple[subprocess.Popen[bytes], int, ProcessTree]
"""A started child: the process, the read end of its output pipe, its tree."""


def start(spec: ChildSpec) -> Started:
    """Start `spec` (`child.spawn`) as the root of a tree, marked. The process, the read end
    of its output pipe, its tree. Blocks for the fork; raises `OSError`."""
    spec, marker = marked(spec)
    popen, read = child.spawn(spec)
    return popen, read, LocalTree(popen.pid, marker, reaped=lambda: popen.returncode is not None)


def marked(spec: ChildSpec) -> tuple[ChildSpec, str]:
    """`spec` with a fresh marker in its environment, and the marker."""
    marker = secrets.token_hex(8)
    env = (*((k, v) for k, v in spec.env if k != MARKER), (MARKER, marker))
    return ChildSpec(
        argv=spec.argv, env=env, new_session=spec.new_session, death_signal=spec.death_signal
    ), marker
