"""SIGINT and SIGTERM for the commands that run an executor (launch, demo), from their first
line: no trio here, so the handlers are in place before the modules that fork on import
(ctypes' ``ldconfig -p``) or start anything are loaded. See cli/launch.py for the phases."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from types import FrameType
from typing import Final, Protocol

SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived in a synchronous phase; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Cancellable(Protocol):
    """A scope a signal cancels (a ``trio.CancelScope``)."""

    def cancel(self) -> None: ...


class Signals:
    """What the process got: the first SIGINT or SIGTERM, once ``installed``."""

    def __init__(self) -> None:
        self.first: int | None = None
        self.raising = True

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.first is None:
            self.first = signum
        if self.raising:
            self.raising = False  # one exception per run: the unwinding is not interrupted
            raise Interrupted(signum)

    async def cancel_on(self, received: AsyncIterator[int], scope: Cancellable) -> None:
        """Record each signal of `received` (a trio signal receiver) and cancel `scope`:
        later ones change nothing, the stop under way is already bounded."""
        async for signum in received:
            if self.first is None:
                self.first = signum
            scope.cancel()

    @contextlib.contextmanager
    def installed(self) -> Iterator[Signals]:
        """Both signals handled for the whole command. While ``raising`` the first raises
        `Interrupted` (synchronous code); after it they are only recorded, so that what trio
        redelivers when its signal receiver closes (a second Ctrl-C during the stop) cannot
        raise KeyboardInterrupt past the ``stopped`` line."""
        old = {s: signal.signal(s, self._handler) for s in SIGNALS}
        try:
            yield self
        finally:
            for s, h in old.items():
                signal.signal(s, h)


def interrupted_exit(signum: int, phase: str, what: str) -> int:
    """One line for a command stopped before it served, and the shell's exit for a signal."""
    name = signal.Signals(signum).name
    print(f"exedra-engine: interrupted by {name} while {phase}; {what}", file=sys.stderr)
    return 128 + signum
