"""A started executor as trio holds it: the fork ran on the spawner thread of
`exedra_engine._shell.launch.child` (why: there), reached through a trio worker thread
(`TrioLoop.spawn`) so that the event loop never blocks; the exit is awaited on a pidfd, not
on a polling tick."""

from __future__ import annotations

import contextlib
import os
import subprocess

import trio

from exedra_engine._shell.launch.child import open_pidfd
from exedra_engine._shell.launch.tree import ProcessTree, Started, collect


class Child:
    """A started executor: its pid, its merged stdout/stderr as a trio stream, its exit, its
    process tree."""

    def __init__(
        self, popen: subprocess.Popen[bytes], stdout: trio.lowlevel.FdStream, tree: ProcessTree
    ) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdout = stdout
        self.tree = tree
        self._pidfd = open_pidfd(popen.pid)

    @property
    def returncode(self) -> int | None:
        """The exit status (minus the signal number), None while it runs."""
        return self._popen.returncode

    async def wait(self) -> int:
        """Wait for the exit and reap the child (after the last walk of its tree that its
        pid allows: `tree.collect`)."""
        while (code := collect(self._popen, self.tree)) is None:
            if self._pidfd is not None:
                await trio.lowlevel.wait_readable(self._pidfd)
            else:
                await trio.sleep(0.005)
        if self._pidfd is not None:
            fd, self._pidfd = self._pidfd, None
            with contextlib.suppress(OSError):
                os.close(fd)
        return code


def child(started: Started) -> Child:
    """The child `Spawn` started, its output pipe a trio stream."""
    popen, read, tree = started
    return Child(popen, trio.lowlevel.FdStream(read), tree)
