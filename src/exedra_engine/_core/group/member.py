"""The members of a group while it is planned: each checked, with its constraints over the
group's, its facts and its profile; and what the planner decides for it as it goes."""

from __future__ import annotations

from collections.abc import Sequence

from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.group.cpus import CpuShare
from exedra_engine._core.group.values import GroupMember, MemberFacts
from exedra_engine._core.values import Constraints
from exedra_engine.errors import PlanError


class Member:
    """One member while it is planned."""

    def __init__(self, m: GroupMember, c: Constraints, f: MemberFacts, p: ExecutorProfile) -> None:
        self.m, self.c, self.f, self.p = m, c, f, p
        self.cpu: CpuShare | None = None
        self.extra: tuple[str, ...] = ()
        self.in_use: frozenset[int] = frozenset()
        self.floor = self.want = 0
        self.why = ""

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
        Member(m, _constraints(constraints, m, executors, notes), f, executors.profile(m.spec.kind))
        for m, f in zip(members, facts or [MemberFacts()] * len(members), strict=True)
    ]


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
