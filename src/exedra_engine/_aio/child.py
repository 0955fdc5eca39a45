"""A started executor on an asyncio loop: its exit seen on a pidfd registered with the loop
(``add_reader``; polled on kernels without one), no child watcher, no thread per process."""

from __future__ import annotations

import asyncio
import os
import subprocess

from exedra_engine._shell.launch import child
from exedra_engine._shell.launch.tree import ProcessTree, collect


class Child:
    """A started executor: its pid, its exit (`exited`, the status; `leader_exited`, set with
    it), its process tree."""

    def __init__(
        self, popen: subprocess.Popen[bytes], tree: ProcessTree, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.tree = tree
        self._loop = loop
        self.exited: asyncio.Future[int] = loop.create_future()
        self.leader_exited = asyncio.Event()
        self._pidfd = child.open_pidfd(popen.pid)
        self._tick: asyncio.TimerHandle | None = None
        if self._pidfd is not None:
            loop.add_reader(self._pidfd, self._check)
        else:
            self._poll()

    def _check(self) -> None:
        code = collect(self.popen, self.tree)
        if code is None:
            return
        self.release()
        if not self.exited.done():
            self.exited.set_result(code)
            self.leader_exited.set()

    def _poll(self) -> None:
        self._check()
        if not self.exited.done():
            self._tick = self._loop.call_later(0.005, self._poll)

    def release(self) -> None:
        """Stop watching (the pidfd is closed)."""
        if self._pidfd is not None:
            fd, self._pidfd = self._pidfd, None
            self._loop.remove_reader(fd)
            os.close(fd)
        if self._tick is not None:
            self._tick.cancel()
