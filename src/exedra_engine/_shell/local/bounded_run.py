"""Asking a binary something (``--version``, ``--help``, ``--list-devices``), bounded end to
end: in time, in output, and in what it leaves behind.

A probe of a binary is a launch in small, and gets the launch's handling of processes that
escape (`exedra_engine._shell.launch.tree`): the binary runs in a session of its own, marked,
with the kernel's parent-death signal set; when it has
answered, exceeded its time or flooded its output, every process of its tree (its group,
and any helper that called ``setsid``: ``setsid sleep 197 &`` in a wrapper) is killed and
reaped. Its pipes are read until end-of-file, or for `PIPE_DRAIN` once the binary itself
has exited (a helper that escaped holds them open for ever), never past the deadline.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final, NamedTuple

import msgspec

from exedra_engine._core.launch.child import ChildSpec
from exedra_engine._shell import notice
from exedra_engine._shell.launch import child, tree
from exedra_engine._shell.launch.tree import PIPE_DRAIN, LocalTree

POLL: Final = 0.05
"""Seconds between looks at the binary's own exit while its pipes stay open."""
REAP: Final = 2.0
"""Seconds given to the killed tree to be gone (SIGKILL: it cannot refuse)."""


class Ran(NamedTuple):
    """What a bounded run gave."""

    out: bytes
    err: bytes
    problem: str
    """Why the output is not the binary's whole answer ("" when it is): it could not be
    run, ran out of time, or printed more than allowed."""
    timed_out: bool = False
    """Whether it ran out of time (a slow host: worth asking again later)."""


def ask_binary(
    argv: Sequence[str],
    *,
    timeout: float,
    max_output: int,
    env: Mapping[str, str] | None = None,
    slow: float = 1.0,
    enough: Callable[[bytes], bool] | None = None,
) -> Ran:
    """Run `argv` (under `env`, else this process's environment) until it exits and its
    pipes close, for at most `timeout` seconds and `max_output` bytes on each pipe; then
    nothing it started is left. Announces a binary still running after `slow` seconds
    (`exedra_engine._shell.notice`). `enough`, given each chunk of its error output, says
    when the answer is in (a server that has logged what was asked and would run on): the
    run ends there, as a whole answer. Never raises for the binary's faults."""
    what = " ".join(argv[:2])
    spec, marker = tree.marked(
        ChildSpec(argv=tuple(argv), env=tuple((env if env is not None else os.environ).items()))
    )
    prefix, preexec = child.death_signal(spec.death_signal)
    if prefix and "/" not in argv[0]:
        import shutil

        found = shutil.which(argv[0], path=dict(spec.env).get("PATH", os.defpath))
        spec = msgspec.structs.replace(spec, argv=(found or argv[0], *spec.argv[1:]))
    if prefix and not os.access(spec.argv[0], os.X_OK):
        # setpriv would run and report the failed exec itself: say it as Popen would.
        return Ran(b"", b"", f"{argv[0]} cannot be run: {_access_problem(argv[0])}")
    try:
        proc = subprocess.Popen(
            [*prefix, *spec.argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(spec.env),
            start_new_session=True,
            preexec_fn=preexec,  # noqa: PLW1509  (only when setpriv is missing, as launch)
        )
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) else None
        return Ran(b"", b"", f"{argv[0]} cannot be run: {why or e}")
    procs = tree.LocalTree(proc.pid, marker, reaped=lambda: proc.returncode is not None)
    try:
        return _read(proc, what, timeout=timeout, max_output=max_output, slow=slow, enough=enough)
    finally:
        # Answered, timed out, flooded or interrupted (Ctrl-C): the whole tree goes.
        _end(proc, procs)


def _read(
    proc: subprocess.Popen[bytes],
    what: str,
    *,
    timeout: float,
    max_output: int,
    slow: float,
    enough: Callable[[bytes], bool] | None = None,
) -> Ran:
    assert proc.stdout is not None and proc.stderr is not None
    start = time.monotonic()
    deadline = start + timeout
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    announced = False
    drain_until: float | None = None
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            now = time.monotonic()
            if drain_until is None and _exited(proc.pid):
                drain_until = min(now + PIPE_DRAIN, deadline)
            if drain_until is not None and now >= drain_until:
                break  # it exited; what still holds its pipes is a helper that escaped
            if now >= deadline:
                why = f"{what} did not exit within {timeout:g} s"
                return Ran(bytes(bufs[proc.stdout.fileno()]), b"", why, timed_out=True)
            if not announced and now - start >= slow:
                announced = True
                notice.say(f"waiting for {what} to answer (given up after {timeout:g} s)")
            ready = sel.select(min(deadline - now, POLL))
            if (
                ran := _take(
                    sel, ready, bufs, proc, what=what, max_output=max_output, enough=enough
                )
            ) is not None:
                return ran
    return Ran(bytes(bufs[proc.stdout.fileno()]), bytes(bufs[proc.stderr.fileno()]), "")


def _take(
    sel: selectors.BaseSelector,
    ready: list[tuple[selectors.SelectorKey, int]],
    bufs: dict[int, bytearray],
    proc: subprocess.Popen[bytes],
    *,
    what: str,
    max_output: int,
    enough: Callable[[bytes], bool] | None,
) -> Ran | None:
    """Read what the pipes in `ready` hold into `bufs`: the run's end where the output
    flooded or `enough` is said, else None."""
    assert proc.stdout is not None and proc.stderr is not None
    out, err = proc.stdout.fileno(), proc.stderr.fileno()
    for key, _ in ready:
        chunk = os.read(key.fd, 65536)
        if not chunk:
            sel.unregister(key.fd)
            continue
        buf = bufs[key.fd]
        if len(buf) + len(chunk) > max_output:
            stream = "output" if key.fd == out else "error output"
            why = f"{what} printed more than {max_output} bytes of {stream}"
            return Ran(bytes(bufs[out]), bytes(bufs[err]), why)
        buf += chunk
        if enough is not None and key.fd == err and enough(chunk):
            return Ran(bytes(bufs[out]), bytes(buf), "")
    return None


def _exited(pid: int) -> bool:
    """Whether the binary has exited, without reaping it: an unreaped leader keeps its pid
    and its group's id from being reused, so the group can still be signalled safely."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _end(proc: subprocess.Popen[bytes], procs: LocalTree) -> None:
    """Kill and reap every process of the tree, the binary first; close its pipes."""
    try:
        # The leader is not reaped yet (`_exited` leaves it): its group id is still its own,
        # and this walk remembers every helper for the walks after the reap.
        procs.signal("SIGKILL")
        # Unkillable (a stuck NFS read) after REAP: it holds nothing of ours but its pid.
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=REAP)
        # The leader is reaped: what is left is signalled through pidfds (each process seen
        # by a walk, matched by start time, or marked), never by the group id it no longer
        # holds.
        until = time.monotonic() + REAP
        while procs.alive() and time.monotonic() < until:
            procs.signal("SIGKILL")
            time.sleep(0.01)
    finally:
        procs.release()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _access_problem(path: str) -> str:
    if not os.path.exists(path):
        return "No such file or directory"
    return "Permission denied"
