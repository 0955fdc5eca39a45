"""An example application of examples/ served by uvicorn on loopback, as a user runs it: its
stderr (uvicorn's and the executors' log lines) read all along, so the pipe never fills, and
whatever is left of it killed when a test ends, even a failed one."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import psutil

ROOT = Path(__file__).resolve().parents[2]


class Served:
    """uvicorn serving an example: its process and every line it wrote to stderr so far."""

    def __init__(self, app: str, env: dict[str, str], port: int) -> None:
        argv = ["--app-dir", "examples", app, "--host", "127.0.0.1", "--port", str(port)]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", *argv],
            cwd=ROOT,
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        self.seen: list[str] = []
        self._started = threading.Event()
        self._reader = threading.Thread(target=self._read, args=(self.process.stderr,))
        self._reader.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self.seen.append(line)
            if "Application startup complete" in line:
                self._started.set()
        self._started.set()

    def started(self, timeout: float) -> bool:
        """Whether uvicorn said its startup (the lifespan: the models' launch) is through."""
        self._started.wait(timeout)
        return self.process.poll() is None

    def ended(self, timeout: float) -> int:
        """uvicorn's exit status once it and its stderr have ended."""
        code = self.process.wait(timeout)
        self._reader.join()
        return code

    def tail(self) -> str:
        return "".join(self.seen[-20:])


@contextmanager
def served(
    app: str,
    env: dict[str, str],
    port: int,
    children: Callable[[int], Iterable[psutil.Process]],
) -> Iterator[Served]:
    """`app` served until the block ends; then uvicorn, if still running, and its
    `children` (the executors it started) are killed."""
    s = Served(app, env, port)
    try:
        yield s
    finally:
        if s.process.poll() is None:
            s.process.kill()
            s.process.wait()
        for p in children(s.process.pid):
            p.kill()
        s._reader.join()
