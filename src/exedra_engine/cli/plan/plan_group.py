"""``exedra-engine plan --group FILE``: plan the members of a group file together on one host
and print each member's plan and the shares (memory, GPU memory, CPUs, threads, port) the
group planner decided; ``--explain`` says why each share is what it is."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import msgspec

from exedra_engine._core.config.findings import TableOrigin, bundled_origin, failing
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.cpus import cpu_set_text
from exedra_engine._core.group.planner import GroupExplained
from exedra_engine._core.group.values import GroupMember, GroupPlan, MemberShare
from exedra_engine._core.memory.explain import size_text
from exedra_engine._core.plan.explained import Explained
from exedra_engine._core.plan.provenance import Source
from exedra_engine._shell.config_check import located_configs
from exedra_engine._shell.group_plan import (
    GroupRequest,
    explain_group_request,
    file_members,
    model_problem,
    read_group_file,
)
from exedra_engine._shell.hardware_file import read_hardware
from exedra_engine._shell.probe import host_hardware
from exedra_engine.cli.plan.request import recorded_table, shared_constraints
from exedra_engine.cli.plan.sources import shown_sources, source_lines
from exedra_engine.cli.render import (
    finding_line,
    findings_summary,
    print_json,
    print_plan,
    shown,
    shown_plan,
)
from exedra_engine.errors import EngineError, PlanError

_PER_MEMBER = (
    ("model", "--model"),
    ("kind", "--kind"),
    ("id", "--id"),
    ("capability", "--capability"),
    ("run_arg", "--run-arg"),
    ("port", "--port"),
    ("ctx", "--ctx"),
    ("threads", "--threads"),
)
"""Options a group file sets per member: refused."""

_NOT_FOR_GROUPS = (
    (
        "measure",
        "--measure measures one model's plan on this machine; a group is planned from "
        "each member's estimate (measure a model with probe --json --measure MODEL and "
        "plan the group with --hardware FILE)",
    ),
)
"""Options a group plan does not do, each with what does the job instead."""

HideFindings = Callable[[Explained, bool, Executors], Explained]


def refuse_per_member(a: argparse.Namespace) -> None:
    """Refuse the options a group file sets per member, and those a group plan does not do
    (`EngineError`, naming them); used by ``plan --group`` and ``launch --group``."""
    given = [
        flag for dest, flag in _PER_MEMBER if getattr(a, dest, None) not in (None, 0, False, [], "")
    ]
    why = [w for dest, w in _NOT_FOR_GROUPS if getattr(a, dest, False)]
    if given:
        why.insert(
            0,
            f"{', '.join(given)} do{'es' * (len(given) == 1)} not go with --group: a group "
            "file sets them per member (id, model, kind, ctx, threads, port, args, env, "
            "run_args, capabilities, weight, executor)",
        )
    if why:
        raise EngineError("; ".join(why))


def plan_group_command(a: argparse.Namespace, hide: HideFindings) -> int:
    """The ``plan --group`` command; `hide` hides the keys in a member's findings as
    ``plan`` does (`cli.plan.hide_findings`, handed in: ``plan`` imports this module)."""
    refuse_per_member(a)
    if a.emit in ("k8s", "quadlet") and not a.host:
        # As plan --emit does: a container's executor binds every address unless told.
        a.host = "0.0.0.0"
    req = group_request(a)
    # Judged as plan judges one plan: by the executors' own tables (what the emit prints
    # does not show findings: only --strict asks for them there).
    judged = a.strict or (a.explain and not a.emit)
    flags = _flag_tables(req, a.hardware) if judged else None
    if a.emit:
        from exedra_engine.cli.plan.emit_group import run_group_emit

        e = explain_group_request(req, flags=flags, explain=a.strict)
        if a.strict:
            group_verdict(a, [hide(m, a.show_secrets, a.executors) for m in e.members])
        return run_group_emit(e.plan, req.hardware, a)
    e = explain_group_request(req, flags=flags)
    members = [hide(m, a.show_secrets, a.executors) for m in e.members]
    if a.strict and not a.explain:
        group_verdict(a, members)  # refused before anything is printed, as plan --strict
    _print(a, e, members)
    return group_verdict(a, members)


def _print(a: argparse.Namespace, e: GroupExplained, members: list[Explained]) -> None:
    """The group plan as text or JSON, its keys hidden unless shown on request."""
    plans = [shown_plan(m.plan, a.show_secrets, m.sources, executors=a.executors) for m in members]
    group = msgspec.structs.replace(e.plan, plans=tuple(plans))
    if a.json:
        _print_json(a, e, group, members)
        return
    sources = [shown_sources(m, a.show_secrets, a.executors) for m in members] if a.explain else []
    _print_group(e, group, members, sources, a.executors)


def _print_json(
    a: argparse.Namespace, e: GroupExplained, group: GroupPlan, members: list[Explained]
) -> None:
    if not a.explain:
        print_json(group)
        return
    print_json(
        {
            "group": group,
            "shares": e.shares,
            "members": [
                {
                    "id": p.spec.id,
                    "sources": shown_sources(m, a.show_secrets, a.executors),
                    "findings": m.findings,
                    "memory": m.memory,
                }
                for p, m in zip(group.plans, members, strict=True)
            ],
        }
    )


def group_verdict(a: argparse.Namespace, members: list[Explained]) -> int:
    """Exit 0; with ``--strict``, `EngineError` (exit 2) naming the first member whose
    layers have findings other than notes, as ``plan --strict`` refuses one plan."""
    if not a.strict:
        return 0
    for m in members:
        if refused := failing(m.findings):
            raise EngineError(
                f"--strict: member {m.plan.spec.id} has findings ({findings_summary(refused)}); "
                f"first: {finding_line(refused[0])}"
            )
    return 0


def group_request(a: argparse.Namespace, *, launching: bool = False) -> GroupRequest:
    """What the group planner is asked, from the command line. A model that is not on this
    host is refused, naming file, line and member, unless the plan is for another host
    (``--hardware``, ``--no-port-check``); `launching`: always, and a model or executor
    that is no regular file too."""
    ex = a.executors
    g = read_group_file(a.group, executors=ex)
    if launching or not (a.hardware or a.no_port_check):
        problem = model_problem(g, launching=launching)
        if problem is not None:
            raise problem
    members = _with_executor(a, file_members(g, os.environ))
    hw = read_hardware(a.hardware, executors=ex) if a.hardware else host_hardware(executors=ex)
    files = () if a.no_config else located_configs(a.config, executors=ex)
    group = shared_constraints(a, files)
    return GroupRequest(
        members=members,
        hardware=hw,
        constraints=group,
        config_files=files,
        check_ports=not a.no_port_check,
        this_host=not a.hardware,
        executors=ex,
        weigh=not a.hardware,
        origins=tuple(e.where(g.source, i) for i, e in enumerate(g.members)),
    )


def _with_executor(
    a: argparse.Namespace, members: tuple[GroupMember, ...]
) -> tuple[GroupMember, ...]:
    """``--executor PATH`` for a group: the binary of every member of its kind that names
    no ``executor`` of its own. Its kind: the one its name says (``llama-server``), else
    the members' one kind; refused when neither tells."""
    if not a.executor:
        return members
    ex: Executors = a.executors
    kinds = tuple(dict.fromkeys(m.spec.kind for m in members))
    name = os.path.basename(a.executor)
    named = next((p.kind for p in ex if p.binary == name), None)
    if named is not None and named not in kinds:
        raise PlanError(
            f"--executor: {name} is the executor of kind {named}, and no member of the group "
            f"is of that kind ({', '.join(kinds)})"
        )
    kind = named or (kinds[0] if len(kinds) == 1 else None)
    if kind is None:
        binaries = ", ".join(ex.profile(k).binary for k in kinds)
        raise PlanError(
            f"--executor {a.executor}: the group's members are of kinds {', '.join(kinds)} and "
            f"the binary's name is none of theirs ({binaries}): set executor: per member in "
            "the group file"
        )
    return tuple(
        msgspec.structs.replace(m, executor=a.executor)
        if m.spec.kind == kind and not m.executor
        else m
        for m in members
    )


def _flag_tables(req: GroupRequest, hardware_file: str | None) -> dict[str, FlagTable]:
    """The installed executors' own flag tables, by kind, for --explain's findings."""
    return {k: t for k, (t, _) in member_tables(req, hardware_file).items() if t is not None}


def member_tables(
    req: GroupRequest, hardware_file: str | None
) -> dict[str, tuple[FlagTable | None, TableOrigin]]:
    """The table each kind's members are judged by, and where it came from, as ``plan
    --explain`` and ``launch`` judge one plan: the binary they run (its own --help,
    cached); for a hardware file's binary, the flags its probe recorded (a dry run runs
    nothing such a file names); the bundled table (None) where that kind's members run
    different binaries."""
    from exedra_engine._shell.local.flag_tables import executor_table

    out: dict[str, tuple[FlagTable | None, TableOrigin]] = {}
    for kind in dict.fromkeys(m.spec.kind for m in req.members):
        profile = req.executors.profile(kind)
        exe = req.hardware.executor(kind) if req.hardware else None
        own = {m.executor for m in req.members if m.spec.kind == kind}
        if len(own) > 1:
            out[kind] = (None, bundled_origin(profile, "its members run different binaries"))
        elif own != {""}:
            out[kind] = executor_table(profile, own.pop())
        elif exe is None:
            out[kind] = (None, bundled_origin(profile))
        elif hardware_file:
            out[kind] = recorded_table(profile, exe, hardware_file)
        else:
            out[kind] = executor_table(profile, exe.path)
    return out


def _print_group(
    e: GroupExplained,
    group: GroupPlan,
    members: list[Explained],
    sources: list[list[Source]],
    executors: Executors,
) -> None:
    """Each member's plan, share and findings, then the group's budget and notes. With
    `sources` (``--explain``) each member's memory arithmetic and where each part of its plan
    came from (as ``plan --explain`` shows them), and each share's arithmetic at the end."""
    g = e.plan
    for i, (plan, share) in enumerate(zip(group.plans, g.shares, strict=True)):
        if i:
            print()
        print(f"member    {shown(share.id)}")
        print_plan(plan, executors)
        print("share     " + _share_text(share))
        if sources:
            for line in e.members[i].memory:
                print(f"          {shown(line)}")
        found = members[i].findings
        print("findings  " + (finding_line(found[0]) if found else "none"))
        for f in found[1:]:
            print(f"          {finding_line(f)}")
        if sources:
            heading, *lines = source_lines(sources[i], indent=" " * 12)
            print(f"          {heading}", *lines, sep="\n")
    print()
    budget = f"{size_text(g.budget)} of host memory shared" if g.budget else "memory not shared"
    print(f"group     {len(g.shares)} members, {budget}")
    for j, b in enumerate(g.device_budgets):
        print(f"          GPU {j}: {size_text(b)} shared")
    for note in g.notes:
        print(f"note      {shown(note)}")
    if sources and e.shares:
        print("\nshares, and why:")
        for line in e.shares:
            print(f"  {shown(line)}")


def _share_text(s: MemberShare) -> str:
    parts = [f"port {s.port}"]
    if s.memory:
        parts.append(f"memory {size_text(s.memory)} (planned resident {size_text(s.resident)})")
    elif s.resident:
        parts.append(f"planned resident {size_text(s.resident)}")
    for j, d in enumerate(s.device_memory):
        if d:
            parts.append(f"GPU {j} {size_text(d)}")
    if s.cpus:
        parts.append(f"CPUs {cpu_set_text(s.cpus)}")
    if s.threads:
        parts.append(f"{s.threads} thread{'s' if s.threads > 1 else ''}")
    return ", ".join(parts)
