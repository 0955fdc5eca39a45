"""Starting an executor so that its parent-death signal outlives the start.

Linux ties ``PR_SET_PDEATHSIG`` to the *thread* that forked the child, not to the process.
``trio.lowlevel.open_process`` forks from a worker of trio's thread cache, and an idle worker
exits after 10 s: every executor then got SIGKILL about 10 s after it started (seen on a
model that loads in 5-10 s). So every fork happens on one daemon thread that lives as long
as this process, and the child dies with the process, not with a cache thread.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import Any

import trio


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


class Child:
    """A started executor: its pid, its merged stdout/stderr as a trio stream, its exit."""

    def __init__(self, popen: subprocess.Popen[bytes], stdout: trio.lowlevel.FdStream) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdout = stdout
        self._pidfd: int | None
        try:
            self._pidfd = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):  # kernels before 5.3: poll instead
            self._pidfd = None

    @property
    def returncode(self) -> int | None:
        """The exit status (minus the signal number), None while it runs."""
        return self._popen.returncode

    async def wait(self) -> int:
        """Wait for the exit and reap the child."""
        while self._popen.returncode is None:
            if self._pidfd is not None:
                await trio.lowlevel.wait_readable(self._pidfd)
                self._popen.wait()
            elif self._popen.poll() is None:
                await trio.sleep(0.005)
        if self._pidfd is not None:
            fd, self._pidfd = self._pidfd, None
            with contextlib.suppress(OSError):
                os.close(fd)
        return self._popen.returncode


def _popen(
    argv: Sequence[str], env: dict[str, str], preexec: Callable[[], None] | None
) -> tuple[subprocess.Popen[bytes], int]:
    read, write = os.pipe()
    try:
        popen = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=write,
            stderr=write,
            env=env,
            start_new_session=True,
            # Only when setpriv is missing (see launcher._death_signal); the fork runs on the
            # spawner thread, and the hook calls nothing but prctl and getppid.
            preexec_fn=preexec,  # noqa: PLW1509
        )
    except BaseException:
        os.close(read)
        raise
    finally:
        os.close(write)
    return popen, read


async def start(
    argv: Sequence[str], env: dict[str, str], preexec: Callable[[], None] | None = None
) -> Child:
    """Start `argv` in its own session, stdout and stderr on one pipe; raises OSError."""
    popen, read = await trio.to_thread.run_sync(_SPAWNER.call, lambda: _popen(argv, env, preexec))
    return Child(popen, trio.lowlevel.FdStream(read))
