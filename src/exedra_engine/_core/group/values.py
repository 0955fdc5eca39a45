"""The values of a group plan: what is asked (`GroupMember`), what each member is given
(`MemberShare`) and the result (`GroupPlan`), one `LaunchPlan` per member in member order.

These are the contract between the group planner, the group launchers and the group emitters;
each is frozen and JSON-serializable like every other value of the library."""

from __future__ import annotations

import msgspec

from exedra_engine._core.gguf.inventory import ModelInventory
from exedra_engine._core.memory.extra_buffers import WeightBuffers
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.struct import Value
from exedra_engine._core.values import Constraints, ExecutorInfo, Hardware, ModelInfo, ModelSpec
from exedra_engine.errors import PlanError


class GroupMember(Value, frozen=True, kw_only=True, omit_defaults=True):
    """One executor of a group: its model, its own constraints (as `plan` takes them) and its
    weight, its share of the host's CPUs relative to the other members'."""

    spec: ModelSpec
    """The member's model; `spec.id` names the member and must be unique in the group."""
    constraints: Constraints = Constraints()
    weight: int = 1
    """Relative share of the CPUs (threads and the pinned CPU set); at least 1."""
    executor: str = ""
    """The binary that runs this member ("": the host's executor of its kind)."""

    def hardware(self, hw: Hardware) -> Hardware:
        """`hw` as this member sees it: its own executor (if any) in place of the host's
        executor of its kind, with that one's backends."""
        if not self.executor:
            return hw
        kind = self.spec.kind
        host = hw.executor(kind)
        mine = ExecutorInfo(
            kind=kind, path=self.executor, backends=host.backends if host is not None else ()
        )
        others = tuple(e for e in hw.executors if e.kind != kind)
        return msgspec.structs.replace(hw, executors=(*others, mine))


class MemberShare(Value, frozen=True, kw_only=True, omit_defaults=True):
    """What the group plan gave one member, beside its `LaunchPlan`."""

    id: str
    port: int
    memory: int = 0
    """Bytes of host memory the member may hold resident (its plan's resident total fits it);
    0: not shared (host memory unknown, or the member's model was not read)."""
    device_memory: tuple[int, ...] = ()
    """Bytes of each device's memory the member may reserve, in the order of the devices
    the group shares (`exedra_engine._core.group.memory.group_devices`: the executor's own
    device list where it was asked, else `Hardware.gpus`)."""
    cpus: tuple[int, ...] = ()
    """The CPU ids the member is pinned to; empty: not pinned."""
    threads: int = 0
    """Threads the member runs with; 0: the executor's default."""
    resident: int = 0
    """Bytes of host memory its plan expects it to hold resident at its peak (within
    `memory`); 0: not estimated (no model header read)."""


class GroupPlan(Value, frozen=True, kw_only=True, omit_defaults=True):
    """A plan for several executors on one host: `plans[i]` is member i's `LaunchPlan`
    (member order), `shares[i]` what it was given; `budget` the host memory they share."""

    plans: tuple[LaunchPlan, ...]
    shares: tuple[MemberShare, ...]
    budget: int = 0
    """Bytes of host memory the members' resident totals sum within (0: unknown)."""
    device_budgets: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    """What the group planner decided that a reader should know (fewer cores than members...)."""

    def __post_init__(self) -> None:
        # Two tuples in the JSON, one list of members: made (or decoded) whole, or refused.
        if len(self.plans) != len(self.shares):
            raise PlanError(f"the group has {len(self.plans)} plans for {len(self.shares)} shares")

    @property
    def members(self) -> tuple[tuple[MemberShare, LaunchPlan], ...]:
        """Each member's share and plan, in member order."""
        return tuple(zip(self.shares, self.plans, strict=True))

    @property
    def ids(self) -> tuple[str, ...]:
        """The members' ids, in member order."""
        return tuple(s.id for s in self.shares)

    def plan_of(self, member_id: str) -> LaunchPlan:
        """The `LaunchPlan` of the member named `member_id` (KeyError if none)."""
        for share, plan in self.members:
            if share.id == member_id:
                return plan
        raise KeyError(member_id)


class MemberFacts(Value, frozen=True, kw_only=True):
    """What was read for one member (by `plan_group_on_host`, or by the caller of the pure
    `plan_group`): the same facts `plan_launch` takes, and the model file's size."""

    model: ModelInfo | None = None
    """The model's header (None: not read; a dry run plans without it)."""
    inventory: ModelInventory | None = None
    """The model's tensor inventory (`read_inventory`): the memory estimate needs it."""
    side_models: tuple[ModelInventory, ...] = ()
    """Inventories of the projector and draft model its argv names."""
    file_size: int = 0
    """Bytes of the model file (0: unknown): the memory estimate of an executor whose
    model has no readable header (whisper-server's ggml files)."""
    weight_buffers: WeightBuffers | None = None
    """Where the member's binary put its weights in a real load with its placement (the
    build's extra host copies), as `PlanFacts.weight_buffers`."""
