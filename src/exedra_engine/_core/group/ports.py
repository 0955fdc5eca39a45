"""The ports a group's members may not take, as one shared record and a view per member.

Each member's plan skips the host's ports in use, the running plans', every other member's
explicit port, and the ports the members before it were given (then really listen on). A
copy of all of those per member is quadratic in the members; a view over one record is not.
"""

from __future__ import annotations

from collections.abc import Iterator, Set

from exedra_engine._core.plan.ports import next_free_port


class Taken:
    """The ports taken so far in one group: fixed ones, explicit ones by member, and the
    ports given to the members in order (the reserved one, then the one its plan listens on)."""

    def __init__(self, fixed: Set[int], explicit: dict[int, str]) -> None:
        self.fixed = frozenset(fixed)
        self.explicit = explicit
        """Each explicit port, and the member that asked for it."""
        self.given: dict[int, int] = {}
        """Each port given to a member, and that member's place (the first to get it)."""
        self._next: dict[tuple[int, frozenset[int]], int] = {}
        # by port base and the ports only that kind cannot bind: below it, every port is taken

    def give(self, port: int, place: int) -> None:
        """Mark `port` as taken by the member at `place`: its reserved port, then the port
        its plan listens on (a layer may move it onto a later member's reserved one, which
        the members after `place` must then skip)."""
        if place < self.given.get(port, place + 1):
            self.given[port] = place

    def view(self, own: str, place: int, kind_only: frozenset[int] = frozenset()) -> PortsView:
        """The ports the member `own` at `place` may not take; `kind_only`: those its
        executor alone cannot bind (TIME_WAIT ports, for one without SO_REUSEADDR)."""
        return PortsView(self, own, place, kind_only)

    def scan(self, base: int, place: int, kind_only: frozenset[int] = frozenset()) -> int | None:
        """The first port from `base` that the member at `place`, which set none, may take."""
        # Ports are only ever added, so where a scan from `base` stopped, the next one
        # may start: the scans of all members cost one pass, not one pass each. Kept per
        # `kind_only`, so a port only one kind skips stays free for the others.
        key = (base, kind_only)
        start = max(base, self._next.get(key, base))
        port = next_free_port(start, PortsView(self, "", place, kind_only))
        if port is not None:
            self._next[key] = port
        return port


class PortsView(Set[int]):
    """The ports the member `own` at `place` may not take: a view of a `Taken` record."""

    __slots__ = ("_kind_only", "_own", "_place", "_taken")

    def __init__(
        self, taken: Taken, own: str, place: int, kind_only: frozenset[int] = frozenset()
    ) -> None:
        self._taken, self._own, self._place = taken, own, place
        self._kind_only = kind_only

    def __contains__(self, port: object) -> bool:
        t = self._taken
        if port in t.fixed or port in self._kind_only:
            return True
        if not isinstance(port, int):
            return False
        who = t.explicit.get(port)
        if who is not None and who != self._own:
            return True
        at = t.given.get(port)
        return at is not None and at < self._place

    def __iter__(self) -> Iterator[int]:
        # Nothing in the planner walks it (it asks `in`); here for the `Set` contract.
        t = self._taken
        every = {*t.fixed, *t.explicit, *t.given, *self._kind_only}
        return iter(sorted(p for p in every if p in self))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"PortsView({sorted(self)!r})"
