"""SIGINT and SIGTERM for the commands that run an executor (launch, demo), from their first
line: no trio here, so the handlers are in place before the modules that fork on import
(ctypes' ``ldconfig -p``) or start anything are loaded. See cli/launch/__init__.py for the
phases."""

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


@contextlib.contextmanager
def ending() -> Iterator[None]:
    """For every command: SIGTERM raises `Interrupted` as SIGINT raises KeyboardInterrupt,
    so either ends the command with one line and 128+N (`exit_line`) wherever it waits, an
    open(2) of a FIFO included. A handler the embedding program set is left alone (the
    default is replaced only), as is SIGINT ignored by a shell for a background job."""
    old = signal.getsignal(signal.SIGTERM)
    replaced = old == signal.SIG_DFL
    if replaced:
        try:
            signal.signal(signal.SIGTERM, _raise_interrupted)
        except ValueError:  # not the main thread: signal handlers belong to it
            replaced = False
    try:
        yield
    finally:
        if replaced:
            signal.signal(signal.SIGTERM, old)


def _raise_interrupted(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def exit_line(e: KeyboardInterrupt) -> int:
    """The one line and the exit status of a command ended by a signal."""
    signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
    name = signal.Signals(signum).name
    print(f"exedra-engine: interrupted by {name}", file=sys.stderr)
    return 128 + signum


def interrupted_exit(signum: int, phase: str, what: str) -> int:
    """One line for a command stopped before it served, and the shell's exit for a signal."""
    name = signal.Signals(signum).name
    print(f"exedra-engine: interrupted by {name} while {phase}; {what}", file=sys.stderr)
    return 128 + signum
