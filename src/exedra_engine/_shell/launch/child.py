"""Carrying out a `ChildSpec`, for every adapter: the spawner thread, the parent-death
signal, the process group's signals and exit. Blocking calls only; no event loop here.

Linux ties ``PR_SET_PDEATHSIG`` to the *thread* that forked the child, not to the process.
trio (and asyncio's default executor) fork from a worker of a thread cache, and an idle
worker exits after a while: every executor then got SIGKILL about 10 s after it started (seen
on a model that loads in 5-10 s). So every fork happens on one daemon thread that lives as
long as this process, and the child dies with the process, not with a cache thread. The
``setpriv`` probe (a subprocess) runs on that thread too, never on an event loop.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import os
import queue
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any, Final

from exedra_engine._core.launch.child import ChildSpec
from exedra_engine._core.struct import Value

_PR_SET_PDEATHSIG: Final = 1


class ExitReason(Value, frozen=True, kw_only=True):
    """How an executor process ended."""

    returncode: int
    """The exit status, or minus the signal number that ended it (as `subprocess`)."""
    requested: bool
    """Whether `stop` had been called before it ended."""

    @property
    def signal(self) -> int | None:
        """The signal that ended the process, if one did."""
        return -self.returncode if self.returncode < 0 else None

    @property
    def clean(self) -> bool:
        """Exit 0, or death by the SIGTERM of our own `stop`. A SIGKILL at the stop deadline
        is not clean: the executor ignored the request to stop."""
        return self.returncode == 0 or (self.requested and self.signal == signal.SIGTERM)

    def describe(self) -> str:
        """``exit 1``, ``killed by SIGKILL`` and so on, for people."""
        sig = self.signal
        how = f"killed by {signal_name(sig)}" if sig else f"exit {self.returncode}"
        return how + (" after a stop request" if self.requested else "")


def signal_name(number: int) -> str:
    """``SIGKILL`` for 9; ``signal 77`` for a number Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@functools.cache
def setpriv() -> str | None:
    """util-linux's setpriv, if it can set the parent-death signal (probed once, on the
    spawner thread)."""
    path = shutil.which("setpriv")
    if path is None:
        return None
    try:
        out = subprocess.run(
            [path, "--help"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return path if "--pdeathsig" in out else None


def death_signal(name: str) -> tuple[list[str], Callable[[], None] | None]:
    """How the child gets signal `name` when its parent dies: an argv prefix, or a pre-exec
    hook.

    setpriv sets PR_SET_PDEATHSIG in the child and execs the executor, so the spawn can use
    vfork: 0.2 ms instead of a full fork of this (large) process for a Python pre-exec hook,
    ~5 ms here. Its one gap: a parent that dies in the sub-millisecond between fork and
    setpriv's prctl is not noticed, which the pre-exec hook (used when setpriv is missing)
    checks for.
    """
    if not name:
        return [], None
    path = setpriv()
    if path is not None:
        return [path, "--pdeathsig", name.removeprefix("SIG"), "--"], None
    return [], _child_setup(os.getpid(), signal.Signals[name])


def _child_setup(parent: int, sig: int) -> Callable[[], None]:
    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        # Runs in the child between fork and exec: only async-signal-safe work here.
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return setup


class _Spawner:
    """One long-lived thread that runs every fork."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], concurrent.futures.Future[Any]]] = (
            queue.SimpleQueue()
        )
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def call(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="exedra-engine-spawner", daemon=True
                )
                self._thread.start()
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._jobs.put((fn, fut))
        return fut.result()

    def _run(self) -> None:
        while True:
            fn, fut = self._jobs.get()
            try:
                fut.set_result(fn())
            except BaseException as e:  # handed to the caller, which re-raises it
                fut.set_exception(e)


_SPAWNER = _Spawner()


def spawn(spec: ChildSpec) -> tuple[subprocess.Popen[bytes], int]:
    """Start `spec` on the spawner thread; the process and the read end of its output pipe.
    Blocks for the fork (an adapter calls it from a worker thread). Raises `OSError`."""
    return _SPAWNER.call(functools.partial(_popen, spec))  # type: ignore[no-any-return]


def _popen(spec: ChildSpec) -> tuple[subprocess.Popen[bytes], int]:
    prefix, preexec = death_signal(spec.death_signal)
    read, write = os.pipe()
    try:
        popen = subprocess.Popen(
            [*prefix, *spec.argv],
            stdin=subprocess.DEVNULL,
            stdout=write,
            stderr=write,
            env=dict(spec.env),
            start_new_session=spec.new_session,
            # Only when setpriv is missing; the fork runs on the spawner thread, and the hook
            # calls nothing but prctl and getppid.
            preexec_fn=preexec,  # noqa: PLW1509
        )
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return popen, read


def open_pidfd(pid: int) -> int | None:
    """A descriptor that turns readable when `pid` exits; None on kernels before 5.3."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None
