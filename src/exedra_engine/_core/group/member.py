"""The members of a group while it is planned: each checked, with its constraints over the
group's, its facts and its profile; and what the planner decides for it as it goes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from typing import Literal

from msgspec.structs import replace

from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.group.cpus import (
    CpuShare,
    OwnSetting,
    cpu_ids,
    cpu_set_text,
    own_cpu_setting,
    partition_cpus,
    pinning_args,
)
from exedra_engine._core.group.memory import Running, floor_memory, whisper_resident
from exedra_engine._core.group.ports import Taken
from exedra_engine._core.group.values import GroupMember, MemberFacts
from exedra_engine._core.plan.engine_args import (
    RANK_CALLER,
    RANK_CONFIG_ENGINE,
    RANK_CONFIG_ENV,
    RANK_CONFIG_MODEL,
    RANK_ENGINE,
    RANK_RUN_ARGS,
)
from exedra_engine._core.plan.planner import Staged
from exedra_engine._core.struct import Value
from exedra_engine._core.values import Constraints, Hardware
from exedra_engine.constants import DEFAULT_PORT_BASE, MAX_GROUP_MEMBERS
from exedra_engine.errors import PlanError, PortInUse


class Member(Value, frozen=True, kw_only=True):
    """One member while it is planned: what it was given, then what the planner decided
    for it, each stage a new value (`with_cpus`, `with_ports`, `with_memory`)."""

    m: GroupMember
    c: Constraints
    """Its constraints over the group's (with its threads and port base once decided)."""
    f: MemberFacts
    p: ExecutorProfile
    cpu: CpuShare | None = None
    extra: tuple[str, ...] = ()
    """Flags that end its engine layer: its threads and CPU set."""
    in_use: Set[int] = frozenset()
    """The ports it may not take (a view of the group's record: `group/ports.py`)."""
    floor: int = 0
    want: int = 0
    weights: int = 0
    """The host bytes of its model file's mapped weights in its floor (0: not estimated, or
    read into memory with ``--no-mmap``): what members of one file share."""
    why: Literal["llama", "file", "unknown", ""] = ""
    """How its memory was judged: its plan's estimate, its file's, or not at all."""

    @property
    def id(self) -> str:
        return self.m.spec.id


def members_of(
    members: Sequence[GroupMember],
    constraints: Constraints,
    facts: Sequence[MemberFacts],
    executors: Executors,
    notes: list[str],
) -> list[Member]:
    """The members checked, each with its constraints over the group's and its facts."""
    _check_members(members)
    if facts and len(facts) != len(members):
        raise PlanError(f"{len(facts)} member facts for {len(members)} members")
    return [
        Member(
            m=m,
            c=_constraints(constraints, m, executors, notes),
            f=f,
            p=executors.profile(m.spec.kind),
        )
        for m, f in zip(members, facts or [MemberFacts()] * len(members), strict=True)
    ]


def with_cpus(
    ms: list[Member], hw: Hardware, cpus: Sequence[int] | None, notes: list[str]
) -> list[Member]:
    """The members with their CPU shares, threads and pinning flags (none for a lone one)."""
    given = cpu_ids(cpus) if cpus is not None else None  # checked even for a lone member
    if len(ms) < 2:
        return ms  # a lone executor already has every core: planned as `plan_launch` plans it
    if given is None:
        ids: tuple[int, ...] = tuple(range(max(hw.cpu.threads, 1)))
        notes.append(
            f"CPU ids not known (a hardware file gives a count only): assumed 0-{len(ids) - 1}"
        )
    else:
        ids = given
    shares, said = partition_cpus(ids, hw.cpu.threads or len(ids), [x.m.weight for x in ms])
    notes.extend(said)
    out = []
    for x, share in zip(ms, shares, strict=True):
        own = x.c.threads > 0
        c = x.c
        if not own and x.p.threads_flag:
            c = replace(c, threads=share.threads)
        cpu = CpuShare(cpus=share.cpus, threads=c.threads) if own else share
        if own and c.threads > len(share.cpus):
            notes.append(
                f"{x.id}: its own {c.threads} threads run on {len(share.cpus)} "
                f"CPU{'s' if len(share.cpus) > 1 else ''} ({cpu_set_text(share.cpus)}): "
                "more threads than CPUs slow it down"
            )
        out.append(replace(x, c=c, cpu=cpu, extra=pinning_args(x.p, share, threads_set=own)))
    return out


def refuse_own_cpus(x: Member, st: Staged) -> None:
    """Raise `PlanError` when a layer of member `x`'s merge `st` sets its threads or CPUs
    over its share, naming the layer and the flag (or variable), and what to use instead.

    Refused, not followed: a share is the member's part of one partition of the host's
    CPUs, and the plan's text, its ``--json``, the units' ``CPUAffinity=`` and the pods'
    CPU requests are all made from it; a member running threads or CPUs of its own would
    overlap the others while every output said otherwise. Its ``threads:`` (kept in its
    share and said when above its CPUs) and ``weight:`` shape the share instead. A lone
    member has no share (planned as `plan_launch` plans it): its layers decide."""
    if x.cpu is None:
        return
    rank = {layer.name: layer.rank for layer in st.layers}
    engine = next((n for n, r in rank.items() if r == RANK_ENGINE), "")
    own = own_cpu_setting(x.p, st.m, engine)
    if own is None:
        return
    what = own.name if own.name == own.key else f"{own.name} ({own.key})"
    n, where = x.cpu.threads, rank.get(own.layer, -1)
    config = where in (RANK_CONFIG_ENV, RANK_CONFIG_ENGINE, RANK_CONFIG_MODEL)
    there = "there (or plan with --no-config)" if config else "there"
    raise PlanError(
        f"{what} in {_set_by(x, own, where)} would set what the group decides for each "
        f"member, its CPUs and threads (its share: CPUs {cpu_set_text(x.cpu.cpus)}, {n} "
        f"thread{'s' if n != 1 else ''}): remove it {there} and give the member threads: "
        "in the group file instead (weight: gives it more CPUs)"
    )


def _set_by(x: Member, own: OwnSetting, rank: int) -> str:
    """The layer that set `own`, as the member's author knows it."""
    if rank == RANK_CALLER:
        # The group's --arg/--env come first in the caller layer, the member's own after.
        mine = x.m.constraints
        if own.at < 0:
            names = {e.partition("=")[0] for e in mine.extra_env}
            return "its env" if own.name in names else "the group's env (--env)"
        own_from = len(x.c.extra_args) - len(mine.extra_args)
        return "its args" if own.at >= own_from else "the group's args (--arg)"
    if rank == RANK_RUN_ARGS:
        return "its run_args"
    if rank == RANK_CONFIG_ENV:
        return "the override files' env"
    return f"the override files' {own.layer.removeprefix('config ')} section"


def with_ports(
    ms: list[Member],
    in_use: Set[int],
    running: Sequence[Running],
    kind_in_use: Mapping[str, Set[int]] | None = None,
) -> tuple[list[Member], Taken]:
    """The members with the ports each may not take: the host's (and those only its kind
    cannot bind, `kind_in_use`), the running executors', every member's explicit port but
    its own, and the ports the members before it were given; and the group's record of
    them (`Taken`), which their plans' ports join."""
    explicit: dict[int, str] = {}
    for x in ms:
        if x.c.port:
            if x.c.port in explicit:
                raise PortInUse(
                    f"members {explicit[x.c.port]} and {x.id} both ask for port {x.c.port}"
                )
            explicit[x.c.port] = x.id
    taken = Taken(set(in_use) | {r.port for r in running if r.port}, explicit)
    by_kind = {k: frozenset(v) for k, v in (kind_in_use or {}).items()}
    out = []
    for i, x in enumerate(ms):
        c = x.c
        kind_only = by_kind.get(x.m.spec.kind, frozenset())
        if not c.port:
            base = c.port_base or DEFAULT_PORT_BASE
            port = taken.scan(base, i, kind_only) if 0 < base < 65536 else None
            if port is not None:
                taken.give(port, i)
                # Its plan scans from there: every port from the base below it is taken.
                c = replace(c, port_base=port)
        out.append(replace(x, c=c, in_use=taken.view(x.id, i, kind_only)))
    return out, taken


def with_memory(x: Member, st: Staged, want: int) -> Member:
    """The member with its want (`want`: its resident total on the whole budget, decided
    on its merge `st`) and floor (`floor_memory`, on the same merge)."""
    p, f = x.p, x.f
    if want and f.inventory is not None:
        least = floor_memory(
            p, st.hw, f.inventory, sides=f.side_models, items=st.m.items, env=st.m.env
        )
        # The model file's part of the host weights (a projector's or draft's are beside it),
        # when it is mapped: with --no-mmap each process reads its own copy.
        copied = any(it.key == "--mmap" and it.negated for it in st.m.items)
        weights = 0 if copied else min(least.host.parts.weights, f.inventory.size)
        return replace(x, want=want, floor=least.host.total, weights=weights, why="llama")
    size = f.file_size or (f.model.size if f.model is not None else 0)
    resident = whisper_resident(p, size)
    return replace(x, want=resident, floor=resident, why="file" if resident else "unknown")


def id_problem(member_id: str) -> str:
    """Why `member_id` cannot name a member ("" when it can), never echoing it: a unit's
    name and description, a preset's section, every line of a plan and a log hold the id,
    so it holds no control character or line break (a line would end inside it) and does
    not end in a backslash (systemd would join the next line to it)."""
    if not member_id:
        return "the member has no id (ModelSpec.id names it)"
    if not member_id.isprintable():
        return (
            "the id holds a control character, a line break or another unprintable "
            "character (every unit, section and line that names the member holds it)"
        )
    if member_id.endswith("\\"):
        return "the id ends in a backslash (systemd would join the next line to its unit's)"
    return ""


def _check_members(members: Sequence[GroupMember]) -> None:
    if not members:
        raise PlanError("a group needs at least one member")
    if len(members) > MAX_GROUP_MEMBERS:
        raise PlanError(f"{len(members)} members, more than {MAX_GROUP_MEMBERS} in one group")
    seen: set[str] = set()
    for i, m in enumerate(members):
        if problem := id_problem(m.spec.id):
            raise PlanError(f"members[{i}]: {problem}")
        if m.spec.id in seen:
            raise PlanError(f"members[{i}] ({m.spec.id}): the id is used by an earlier member")
        seen.add(m.spec.id)
        if m.weight < 1:
            raise PlanError(f"members[{i}] ({m.spec.id}): weight {m.weight} is below 1")


def _constraints(
    g: Constraints, m: GroupMember, executors: Executors, notes: list[str]
) -> Constraints:
    """The member's constraints over the group's: a field the member sets wins."""
    c = m.constraints
    if g == Constraints():
        return c
    key = c.api_key or g.api_key
    if key and not c.api_key and not executors.profile(m.spec.kind).has_api_key:
        key = ""
        notes.append(
            f"{m.spec.id}: {executors.profile(m.spec.kind).binary} has no API key option: "
            "the group's API key is not applied to it (put an authenticating proxy in front)"
        )
    return Constraints(
        host=c.host or g.host,
        ctx=c.ctx or g.ctx,
        threads=c.threads or g.threads,
        port=c.port,
        port_base=c.port_base or g.port_base,
        api_key=key,
        api_key_env=c.api_key_env or (g.api_key_env if key else ""),
        no_gpu=c.no_gpu or g.no_gpu,
        ui=c.ui or g.ui,
        overrides=c.overrides if c.overrides is not None else g.overrides,
        extra_args=(*g.extra_args, *c.extra_args),
        extra_env=(*g.extra_env, *c.extra_env),
    )
