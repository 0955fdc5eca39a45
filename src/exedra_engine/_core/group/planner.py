"""The pure group planner: several executors on one host, planned together. No I/O.

`plan_group` plans each member as `plan_launch` does, within the shares it decides:
- memory (`exedra_engine._core.group.memory`): the members' resident totals sum within the
  budget a single plan uses, less what running executors hold; each member's automatic
  context and ``--cache-ram`` are sized within its share; a group whose floors do not fit
  is refused (`DoesNotFit`) naming each member and its size. Device memory is shared the
  same way, by what each member's plan reserves on each device;
- CPUs (`exedra_engine._core.group.cpus`): disjoint CPU sets and threads by weight, added to
  each member's engine layer (so an admin override still wins);
- ports: distinct, from the port base, in member order, skipping ports in use and the
  members' explicit ports; a port only one kind's executor cannot bind (TIME_WAIT, for an
  executor without SO_REUSEADDR) is skipped for that kind's members only, so a member's
  port does not move because another kind joined the group.

A group of one is planned exactly as `plan_launch` plans its member.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from functools import partial
from typing import NamedTuple, TypedDict, TypeVar, Unpack, cast

from exedra_engine._core.config.parse import LocatedConfig
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.cpus import cpu_set_text
from exedra_engine._core.group.member import (
    Member,
    members_of,
    refuse_own_cpus,
    with_cpus,
    with_memory,
    with_ports,
)
from exedra_engine._core.group.memory import (
    Running,
    check_running,
    device_shares,
    group_budget,
    shared_weights,
    split_budget,
)
from exedra_engine._core.group.ports import Taken
from exedra_engine._core.group.values import GroupMember, GroupPlan, MemberFacts, MemberShare
from exedra_engine._core.memory.explain import size_text
from exedra_engine._core.memory.settings import MemorySettings, fitter_off
from exedra_engine._core.outcome import boundary
from exedra_engine._core.plan.explained import Explained
from exedra_engine._core.plan.launch_plan import LaunchPlan, read_with
from exedra_engine._core.plan.planner import PlanFacts, Staged, decided, finished, staged
from exedra_engine._core.plan.ports import choose_port
from exedra_engine._core.struct import Value
from exedra_engine._core.values import Constraints, Hardware
from exedra_engine.errors import DoesNotFit, EngineError, NoHardware, PortInUse

_T = TypeVar("_T")


class GroupExplained(Value, frozen=True, kw_only=True):
    """A group plan, each member's `Explained` (provenance, findings, memory arithmetic) in
    member order, and each share and why, for ``plan --group --explain``."""

    plan: GroupPlan
    members: tuple[Explained, ...]
    shares: tuple[str, ...] = ()


class GroupPlanOptions(TypedDict, total=False):
    """The keywords of `plan_members` (and `explain_members`) besides the members, the host
    and the group's constraints; every one may be left out."""

    facts: Sequence[MemberFacts]
    """``facts[i]`` is what was read of member i's model (`MemberFacts`; default: nothing,
    a dry run)."""
    ports_in_use: Set[int]
    """Ports the scan skips and an explicit port must not be in."""
    kind_ports_in_use: Mapping[str, Set[int]] | None
    """``kind_ports_in_use[kind]`` too, for that kind's members only (the ports in TIME_WAIT
    an executor without SO_REUSEADDR cannot bind)."""
    cpus: Sequence[int] | None
    """The CPU ids the group may run on (the process's affinity); None (the default):
    ``0..CPU.threads-1``, said in the notes."""
    running: Sequence[Running]
    """Executors already running that the group joins (their plans or `Instance.actual`):
    what they hold is taken out of the budget, and their ports are skipped."""
    executors: Executors
    """The executors the members' kinds are looked up in (default: `BUILTIN`)."""


class GroupExplainOptions(GroupPlanOptions, total=False):
    """The keywords of `explain_members`: `plan_members`' (`GroupPlanOptions`), and what the
    members' layers are judged by."""

    flags: dict[str, FlagTable] | None
    """The flag tables the members' layers are judged by, by kind (default: the profiles')."""
    config_files: Sequence[LocatedConfig]
    """The override files the members' constraints were merged from, so findings name file
    and line."""


def plan_members(
    members: Sequence[GroupMember],
    hw: Hardware | None,
    constraints: Constraints = Constraints(),
    **options: Unpack[GroupPlanOptions],
) -> GroupPlan:
    """Plan several executors on one host from facts alone (`GroupPlanOptions`: the members'
    model facts, the ports in use, the CPUs, the executors it joins). Deterministic: equal
    inputs give a byte-identical group plan.

    `constraints` are the group's: each member's own constraints win where they set a
    field (zero means unset); `extra_args`/`extra_env` are the group's then the member's;
    the group's API key goes to the members whose executor takes one. A member's own
    ``executor`` runs it in place of the host's executor of its kind.
    """
    # (A `GroupExplainOptions` without the judging keys, all of which may be left out.)
    return _explained(
        members, hw, constraints, cast(GroupExplainOptions, options), explain=False
    ).plan


plan_group = boundary(plan_members)
"""`plan_members` as a Result: ``Success(GroupPlan)``, or ``Failure`` with its `EngineError`."""


def explain_members(
    members: Sequence[GroupMember],
    hw: Hardware | None,
    constraints: Constraints = Constraints(),
    **options: Unpack[GroupExplainOptions],
) -> GroupExplained:
    """`plan_members`, with each member's `Explained` and each share and why; its members'
    layers judged by `GroupExplainOptions.flags` and named by `GroupExplainOptions.config_files`."""
    return _explained(members, hw, constraints, options, explain=True)


explain_group = boundary(explain_members)
"""`explain_members` as a Result: ``Success(GroupExplained)``, or ``Failure`` with its
`EngineError`."""


class _Planning(NamedTuple):
    """What every member's plan is made with."""

    hw: Hardware
    flags: dict[str, FlagTable]
    config_files: Sequence[LocatedConfig]
    executors: Executors
    explain: bool
    solo: bool
    """A group of one, joining nothing: planned, and failing, as `plan_launch` plans it."""

    def facts(self, x: Member, share: tuple[int, str] | None) -> PlanFacts:
        """What member `x`'s plan is made from, within `share` (bytes, and why)."""
        return PlanFacts(
            model=x.f.model,
            ports_in_use=x.in_use,
            inventory=x.f.inventory,
            sides=x.f.side_models,
            budget=share,
            engine_extra=x.extra,
            weight_buffers=x.f.weight_buffers,
        )

    def staged(self, x: Member) -> Staged:
        """Member `x`'s request checked, layered and merged: its one merge (refused when
        a layer sets its threads or CPUs over its share: `refuse_own_cpus`)."""
        pf = self.facts(x, None)
        st = self.naming(
            x,
            lambda: staged(
                x.m.spec, x.m.hardware(self.hw), x.c, pf, executors=self.executors, profile=x.p
            ),
        )
        self.naming(x, partial(refuse_own_cpus, x, st))
        return st

    def decided(self, x: Member, st: Staged, share: tuple[int, str] | None) -> int:
        """Member `x`'s resident total within `share`, decided on its merge (0: none)."""
        memory = self.naming(x, lambda: decided(st, self.facts(x, share)))
        return memory.memory.host.total if memory is not None else 0

    def finished(self, x: Member, st: Staged, share: tuple[int, str] | None) -> Explained:
        """Member `x`'s plan within `share`, made from its merge; explained when asked."""
        if self.naming(x, lambda: choose_port(x.c, x.in_use)) != st.engine_port:
            # A member before it listens where it was to (a layer moved that one's port):
            # its engine layer names another port, so it is merged again.
            st = self.staged(x)
        judge = (self.flags.get(x.m.spec.kind), tuple(self.config_files))
        return self.naming(
            x,
            lambda: finished(
                st,
                self.facts(x, share),
                explain=self.explain,
                judge=judge if self.explain else None,
                executors=self.executors,
            ),
        )

    def naming(self, x: Member, step: Callable[[], _T]) -> _T:
        """`step`, whose errors name member `x` (a group of one fails as `plan_launch`)."""
        try:
            return step()
        except EngineError as e:
            if self.solo:
                raise
            raise _named(e, x.id) from e


def explain_group_plan(
    members: Sequence[GroupMember],
    hw: Hardware | None,
    constraints: Constraints = Constraints(),
    *,
    explain: bool = True,
    **options: Unpack[GroupExplainOptions],
) -> GroupExplained:
    """`explain_group`, raising its `EngineError` (for the shells)."""
    return _explained(members, hw, constraints, options, explain=explain)


def _explained(
    members: Sequence[GroupMember],
    hw: Hardware | None,
    constraints: Constraints,
    options: GroupExplainOptions,
    *,
    explain: bool,
) -> GroupExplained:
    if hw is None:
        raise NoHardware("hardware snapshot is None: call probe() first")
    executors = options.get("executors", BUILTIN)
    running = options.get("running", ())
    check_running(running)
    notes: list[str] = []
    ms = members_of(members, constraints, options.get("facts", ()), executors, notes)
    ms = with_cpus(ms, hw, options.get("cpus"), notes)
    ms, taken = with_ports(
        ms,
        options.get("ports_in_use", frozenset()),
        running,
        options.get("kind_ports_in_use") or {},
    )
    budget, how, dev_held = group_budget(hw, running, {p.kind: p for p in executors})
    planning = _Planning(
        hw=hw,
        flags=options.get("flags") or {},
        config_files=options.get("config_files", ()),
        executors=executors,
        explain=explain,
        solo=len(ms) == 1 and not running,
    )
    whole = None if budget is None else (budget, how)
    merged = [planning.staged(x) for x in ms]
    ms = [
        with_memory(x, st, planning.decided(x, st, whole) if x.f.inventory else 0)
        for x, st in zip(ms, merged, strict=True)
    ]
    shares = _host_shares(ms, budget, how, solo=planning.solo, notes=notes)
    out = _plan_in_order(ms, merged, shares, planning, (budget, how), taken=taken)
    _check_ports(ms, out)
    plans = tuple(e.plan for e in out)
    dev_budgets, dev_shares, said = device_shares(
        [x.id for x in ms], plans, hw, dev_held, judged=_judged(ms, plans, solo=planning.solo)
    )
    notes.extend(said)
    if budget is None:
        notes.append(f"memory not shared: {how}")
    group = GroupPlan(
        plans=plans,
        shares=_member_shares(ms, plans, shares, dev_shares),
        budget=budget or 0,
        device_budgets=dev_budgets,
        notes=tuple(notes),
    )
    lines = _share_lines(ms, group, how) if explain else ()
    return GroupExplained(plan=group, members=tuple(out), shares=lines)


def _host_shares(
    ms: list[Member], budget: int | None, how: str, *, solo: bool, notes: list[str]
) -> tuple[int, ...]:
    """Each member's share of the host memory budget."""
    if not (solo and budget is not None):
        return _memory_shares(ms, budget, how, notes)
    # As `plan_launch` judges it: a llama plan that cannot fit was refused above; an
    # executor judged by its file's estimate alone is planned, and told.
    if ms[0].floor > budget:
        notes.append(
            f"{ms[0].id}: its estimate, {size_text(ms[0].floor)}, is above the "
            f"{size_text(budget)} usable ({how})"
        )
    return (budget,)


def _plan_in_order(
    ms: list[Member],
    merged: list[Staged],
    shares: tuple[int, ...],
    planning: _Planning,
    budget: tuple[int | None, str],
    *,
    taken: Taken,
) -> list[Explained]:
    """Each member's plan within its share, in member order, from its merge."""
    total, how = budget
    whole = None if total is None else (total, how)
    out: list[Explained] = []
    for i, (x, st, share) in enumerate(zip(ms, merged, shares, strict=True)):
        mine = whole if planning.solo or total is None else (share, _share_how(x, total, how))
        out.append(planning.finished(x, st, mine))
        # The members after it skip the port it really listens on (a layer may move one).
        taken.give(out[-1].plan.port, i)
    return out


def _judged(ms: list[Member], plans: tuple[LaunchPlan, ...], *, solo: bool) -> list[bool]:
    """Which members' device reservations are judged (their argv switched the fitter off)."""
    return [
        not solo and p.memory is not None and _fitter_off(read_with(p, x.p).memory)
        for x, p in zip(ms, plans, strict=True)
    ]


def _member_shares(
    ms: list[Member],
    plans: tuple[LaunchPlan, ...],
    shares: tuple[int, ...],
    dev_shares: tuple[tuple[int, ...], ...],
) -> tuple[MemberShare, ...]:
    return tuple(
        MemberShare(
            id=x.id,
            port=p.port,
            memory=share,
            device_memory=dev_shares[i],
            cpus=x.cpu.cpus if x.cpu is not None else (),
            threads=x.cpu.threads if x.cpu is not None else 0,
            resident=_resident(x, p),
        )
        for i, (x, p, share) in enumerate(zip(ms, plans, shares, strict=True))
    )


def _named(e: EngineError, member_id: str) -> EngineError:
    """`e`, of its own class, with the member it was raised for named first."""
    try:
        return type(e)(f"member {member_id}: {e}")
    except TypeError:  # a class whose constructor takes more than a message
        return e


def _fitter_off(s: MemorySettings | None) -> bool:
    return s is not None and bool(fitter_off(s))


def _memory_shares(
    ms: list[Member], budget: int | None, how: str, notes: list[str]
) -> tuple[int, ...]:
    if budget is None:
        return tuple(0 for _ in ms)
    files = [x.f.inventory.paths[0] if x.f.inventory is not None else "" for x in ms]
    twice, said = shared_weights([x.id for x in ms], files, [x.weights for x in ms])
    notes.extend(said)
    floors = [x.floor for x in ms]
    if sum(floors) - twice > budget:
        named = sorted(ms, key=lambda x: (-x.floor, x.id))
        each = ", ".join(f"{x.id} {size_text(x.floor)}" for x in named if x.floor)
        raise DoesNotFit(
            f"the group needs at least {size_text(sum(floors) - twice)} of host memory but "
            f"{size_text(budget)} usable ({how}): {each} (each at its smallest context, "
            "without a prompt cache"
            + (f"; a shared file's weights, {size_text(twice)}, counted once" if twice else "")
            + "); plan fewer members or smaller models"
        )
    return split_budget(budget + twice, floors, [x.want for x in ms])


def _share_how(x: Member, budget: int, how: str) -> str:
    return f"{x.id}'s share of the group's {size_text(budget)}: {how}"


def _check_ports(ms: list[Member], out: list[Explained]) -> None:
    seen: dict[int, str] = {}
    for x, e in zip(ms, out, strict=True):
        port = e.plan.port
        if port in seen:
            raise PortInUse(
                f"members {seen[port]} and {x.id} would both listen on port {port} "
                "(a layer sets it): give one another port"
            )
        seen[port] = x.id


def _resident(x: Member, p: LaunchPlan) -> int:
    if p.memory is not None:
        return p.memory.host.total
    return x.want if x.why == "file" else 0


def _share_lines(ms: list[Member], g: GroupPlan, how: str) -> tuple[str, ...]:
    """Each share and why, one line a decision."""
    lines: list[str] = []
    if g.budget:
        lines.append(f"host memory: {size_text(g.budget)} shared ({how})")
    for x, s in zip(ms, g.shares, strict=True):
        if x.why == "llama":
            mem = (
                f"memory {size_text(s.memory)}: at least {size_text(x.floor)} (smallest "
                f"context, no prompt cache), {size_text(x.want)} alone on the budget; "
                f"planned resident {size_text(s.resident)}"
            )
        elif x.why == "file":
            fixed, pm = x.p.resident_estimate
            mem = (
                f"memory {size_text(s.memory)}: {x.p.binary}'s estimate, the model file + "
                f"{size_text(fixed)} + {pm / 10:g}% of the file = {size_text(s.resident)} "
                "(measured against its peak)"
            )
        else:
            mem = "memory not estimated (the model was not read): no share"
        lines.append(f"{x.id}: {mem}")
        for j, d in enumerate(s.device_memory):
            if d:
                lines.append(f"{x.id}: GPU {j}: {size_text(d)} (what its plan reserves there)")
        if s.cpus:
            lines.append(
                f"{x.id}: CPUs {cpu_set_text(s.cpus)}, {s.threads} thread"
                f"{'s' if s.threads > 1 else ''} (weight {x.m.weight})"
            )
        lines.append(f"{x.id}: port {s.port}")
    return tuple(lines)
