"""An instance's lifecycle as one state machine (h11's ``_state.py`` rule: everything that
decides an instance's state lives here): a `Phase` enum, the `TRANSITIONS` table, and
`Lifecycle`, changed only through its own methods. It holds the phase, when it became
ready, whether a stop was asked for, the signals already sent and the exit status; an
instance asks it (`has_exited`, `may_signal`) and never decides from a field of its own.
Pure."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from exedra_engine._core.launch import stop as policy
from exedra_engine._core.struct import FrozenDict


class Phase(enum.Enum):
    """Where an executor process stands."""

    STARTING = "starting"
    """Started, its ready path not yet answering 200."""
    READY = "ready"
    """Its ready path answered 200 (it was polled, and the listener is its own)."""
    STOPPING = "stopping"
    """A stop or a kill was asked for, or its owner went away: its exit is "requested"."""
    EXITED = "exited"
    """Its leader has exited and its whole process tree is gone."""


class Happening(enum.Enum):
    """What moves an instance from one phase to the next."""

    READY = "ready"
    STOP = "stop"
    EXIT = "exit"


_S, _R, _T, _E = Phase.STARTING, Phase.READY, Phase.STOPPING, Phase.EXITED

TRANSITIONS: Final[Mapping[tuple[Phase, Happening], Phase]] = FrozenDict(
    {
        (_S, Happening.READY): _R,
        (_S, Happening.STOP): _T,
        (_S, Happening.EXIT): _E,
        (_R, Happening.STOP): _T,
        (_R, Happening.EXIT): _E,
        (_T, Happening.STOP): _T,
        (_T, Happening.EXIT): _E,
        # A stop after the exit has nothing left to do; a ready answer seen just before an
        # exit that was recorded first changes nothing.
        (_E, Happening.STOP): _E,
        (_E, Happening.READY): _E,
    }
)
"""Every allowed move; anything else is a bug (`Lifecycle` raises)."""


class Lifecycle:
    """One instance's state: its phase, when it became ready, whether its exit was asked
    for, the signals sent to its tree, and its exit status."""

    def __init__(self) -> None:
        self._phase = Phase.STARTING
        self._ready_at: float | None = None
        self._requested = False
        self._sent: frozenset[str] = frozenset()
        self._returncode: int | None = None

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def ready_at(self) -> float | None:
        """When the ready path first answered 200, on the adapter's clock."""
        return self._ready_at

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for before the exit."""
        return self._requested

    @property
    def sent(self) -> frozenset[str]:
        """The signals sent to the tree so far (by name)."""
        return self._sent

    @property
    def returncode(self) -> int | None:
        """The leader's exit status (minus the signal number) once the leader has exited
        (its tree may still be reaped); None before."""
        return self._returncode

    def has_exited(self) -> bool:
        """Whether the leader has exited and the tree is gone (`Phase.EXITED`)."""
        return self._phase is Phase.EXITED

    def _move(self, happening: Happening) -> Phase:
        nxt = TRANSITIONS.get((self._phase, happening))
        if nxt is None:
            raise RuntimeError(f"an instance cannot go from {self._phase.value} on {happening}")
        self._phase = nxt
        return nxt

    def became_ready(self, at: float) -> None:
        """The ready path answered 200 at `at`."""
        if self._move(Happening.READY) is Phase.READY:
            self._ready_at = at

    def stop_requested(self) -> None:
        """A stop, a kill or the owner's going away."""
        if self._phase is not Phase.EXITED:
            self._requested = True
        self._move(Happening.STOP)

    def may_signal(self, name: str) -> bool:
        """Whether signal `name` may go to the tree now, recorded as sent if so: never once
        it has exited, and never a second SIGTERM (`policy.should_send`)."""
        if self._phase is Phase.EXITED or not policy.should_send(name, self._sent):
            return False
        self._sent |= {name}
        return True

    def leader_exited(self, returncode: int) -> None:
        """The leader exited with `returncode`; its tree is still being reaped (the phase
        stays until it is gone)."""
        if self._phase is not Phase.EXITED:
            self._returncode = returncode

    def exited(self, returncode: int) -> None:
        """The leader exited with `returncode` and the tree is gone."""
        self._move(Happening.EXIT)
        self._returncode = returncode
