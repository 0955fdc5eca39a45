"""What launching a group decides, once for every adapter (trio, asyncio, blocking).

A group starts all or nothing: every member starts at once; the first member whose start
fails is the one reported (`MemberFailed` names it), and the others are stopped, those still
starting killed, before the error is raised. Ready means ready: a member that exits after
its own readiness while another still loads fails the start as well. Each adapter keeps
only the concurrency itself (a nursery, tasks); the bookkeeping of who is ready and who
failed first is `Starting`, and what a caller holds is a `Group`: each member's instance by
id, in member order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypedDict, TypeVar

from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.values import GroupPlan
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine.errors import EngineError, ExitedUnexplained, MemberFailed, PlanError

I = TypeVar("I")  # noqa: E741 - an instance of whichever adapter
J = TypeVar("J")
I_co = TypeVar("I_co", covariant=True)


class MemberExit(Protocol):
    """How a member's process ended (an adapter's `ExitReason`)."""

    @property
    def returncode(self) -> int: ...

    @property
    def requested(self) -> bool: ...

    def describe(self) -> str: ...


class Watched(Protocol):
    """What the group asks of a member's instance while the others still load."""

    @property
    def plan(self) -> LaunchPlan: ...

    @property
    def log_tail(self) -> tuple[str, ...]: ...

    def when_exited(self, fn: Callable[[MemberExit], object]) -> None:
        """Call `fn` with the leader's exit once it has exited (at once if it has)."""
        ...


W = TypeVar("W", bound=Watched)


class Opened(Protocol[I_co]):
    """An async context manager yielding a ready instance (an adapter's `open_instance`);
    contextlib's own type is not imported into the pure core."""

    async def __aenter__(self) -> I_co: ...

    async def __aexit__(self, *exc: Any) -> bool | None: ...


class MemberOptions(TypedDict, total=False):
    """The options of a group's launch, given to each member's `open_instance` as they are."""

    ready_timeout: float | None
    stall_timeout: float | None
    stop_timeout: float
    executors: Executors


class Group(Mapping[str, I]):
    """A running group: ``group[id]`` is that member's instance; iteration gives the ids in
    member order; `plan` is the `GroupPlan` it runs."""

    def __init__(self, plan: GroupPlan, instances: Mapping[str, I]) -> None:
        self._plan = plan
        self._instances = {i: instances[i] for i in plan.ids}

    @property
    def plan(self) -> GroupPlan:
        """The group plan this group runs (immutable)."""
        return self._plan

    @property
    def ids(self) -> tuple[str, ...]:
        """The members' ids, in member order."""
        return self._plan.ids

    def __getitem__(self, member: str) -> I:
        return self._instances[member]

    def __iter__(self) -> Iterator[str]:
        return iter(self._instances)

    def __len__(self) -> int:
        return len(self._instances)

    def map(self, fn: Callable[[I], J]) -> Group[J]:
        """The same group seen through `fn` (the blocking adapter wraps each instance)."""
        return Group(self._plan, {i: fn(inst) for i, inst in self._instances.items()})

    def __repr__(self) -> str:
        return f"Group({', '.join(self.ids)})"


def members(plan: GroupPlan) -> tuple[tuple[str, LaunchPlan], ...]:
    """Each member's id and plan, in member order; a `PlanError` if the plan is not one a
    group can run (ids repeated, no member)."""
    ids = plan.ids
    if not ids:
        raise PlanError("the group has no member")
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise PlanError(f"member ids must be unique in a group: {', '.join(repeated)} repeated")
    return tuple((share.id, p) for share, p in plan.members)


def exited_early(inst: Watched, reason: MemberExit) -> EngineError:
    """The error of a member that exited (`reason`) after its own readiness, before every
    member was ready."""
    name = inst.plan.command.rsplit("/", 1)[-1]
    return ExitedUnexplained(
        f"{name} exited ({reason.describe()}) after it was ready, while other members were "
        "still loading",
        returncode=reason.returncode,
        log=inst.log_tail,
    )


class Starting(Generic[W]):
    """A group's start as it goes: the members ready so far, and the first that failed."""

    def __init__(self, plan: GroupPlan) -> None:
        self._plan = plan
        self.members = members(plan)
        self._ready: dict[str, W] = {}
        self._failed: MemberFailed | None = None
        self._complete = False

    def ready(self, member: str, inst: W) -> bool:
        """Record `member` as ready; whether the whole group now is (then a member's exit
        is no longer the start's failure)."""
        self._ready[member] = inst
        self._complete = self._failed is None and len(self._ready) == len(self.members)
        return self._complete

    def failed(self, member: str, error: EngineError) -> bool:
        """Record `member`'s failure; whether it is the first (the caller then stops the
        rest). Errors that follow the first are what stopping the rest caused."""
        if self._failed is not None:
            return False
        self._failed = MemberFailed(member, error)
        self._failed.__cause__ = error
        return True

    @property
    def error(self) -> MemberFailed | None:
        """The first member's failure; None while none failed."""
        return self._failed

    def group(self) -> Group[W]:
        """The running group (every member ready)."""
        return Group(self._plan, self._ready)

    async def hold(
        self,
        name: str,
        opened: Opened[W],
        leave: Callable[[], Awaitable[object]],
        *,
        all_ready: Callable[[], object],
        first_failure: Callable[[], object],
    ) -> None:
        """One member's task: enter its `opened` block (its adapter's `open_instance`), call
        `all_ready` if it is the last to be ready, hold the block until `leave` returns (the
        block's exit stops the member); a start that fails, or a ready member that exits
        before all are ready, calls `first_failure` if it is the first (the adapter then
        stops the rest)."""

        def exited(reason: MemberExit) -> None:
            # A stop or a kill (the group's own teardown, a cancelled start) is not a failure.
            early = not self._complete and not reason.requested
            if early and self.failed(name, exited_early(inst, reason)):
                first_failure()

        try:
            async with opened as inst:
                if self.ready(name, inst):
                    all_ready()
                inst.when_exited(exited)
                await leave()
        except EngineError as e:
            if self.failed(name, e):
                first_failure()
