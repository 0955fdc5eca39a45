"""``exedra-engine plan --group FILE``: plan the members of a group file together on one host
and print each member's plan and the shares (memory, GPU memory, CPUs, threads, port) the
group planner decided; ``--explain`` says why each share is what it is."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import msgspec

from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.cpus import cpu_set_text
from exedra_engine._core.group.planner import GroupExplained
from exedra_engine._core.group.values import GroupPlan, MemberShare
from exedra_engine._core.memory.explain import size_text
from exedra_engine._core.plan.explained import Explained
from exedra_engine._core.plan.provenance import Source
from exedra_engine._shell.config_check import located_configs
from exedra_engine._shell.group_plan import GroupRequest, explain_group_request, read_group
from exedra_engine._shell.hardware_file import read_hardware
from exedra_engine._shell.probe import host_hardware
from exedra_engine.cli.plan.request import recorded_table, shared_constraints
from exedra_engine.cli.plan.sources import shown_sources, source_lines
from exedra_engine.cli.render import finding_line, print_json, print_plan, shown, shown_plan
from exedra_engine.errors import EngineError

_PER_MEMBER = (
    ("model", "--model"),
    ("kind", "--kind"),
    ("id", "--id"),
    ("capability", "--capability"),
    ("run_arg", "--run-arg"),
    ("port", "--port"),
    ("ctx", "--ctx"),
    ("threads", "--threads"),
    ("executor", "--executor"),
    ("measure", "--measure"),
    ("strict", "--strict"),
)
"""Options a group file sets per member (or that a group plan does not do): refused."""

_NOT_A_FIELD = {
    "--executor": "each kind's executor is the host's (probe, or --hardware FILE), for every "
    "member",
    "--measure": "llama-fit-params measures one plan; a group is planned by its estimates",
    "--strict": "it judges one plan; plan --group lists each member's findings",
}
"""Why each refused option that is no group-file field is refused: the file cannot set it."""

HideFindings = Callable[[Explained, bool, Executors], Explained]


def refuse_per_member(a: argparse.Namespace) -> None:
    """Refuse the options a group file sets per member (`EngineError`, naming them); used by
    ``plan --group`` and ``launch --group``."""
    given = [
        flag for dest, flag in _PER_MEMBER if getattr(a, dest, None) not in (None, 0, False, [], "")
    ]
    fields = [f for f in given if f not in _NOT_A_FIELD]
    why = [f"{f} does not go with --group: {_NOT_A_FIELD[f]}" for f in given if f in _NOT_A_FIELD]
    if fields:
        why.insert(
            0,
            f"{', '.join(fields)} do{'es' * (len(fields) == 1)} not go with --group: a group "
            "file sets them per member (id, model, kind, ctx, threads, port, args, env, "
            "capabilities, weight)",
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
    if a.emit:
        from exedra_engine.cli.plan.emit_group import run_group_emit

        return run_group_emit(explain_group_request(req, explain=False).plan, req.hardware, a)
    e = explain_group_request(req, flags=_flag_tables(req, a.hardware) if a.explain else None)
    members = [hide(m, a.show_secrets, a.executors) for m in e.members]
    plans = [shown_plan(m.plan, a.show_secrets, m.sources, executors=a.executors) for m in members]
    group = msgspec.structs.replace(e.plan, plans=tuple(plans))
    if a.json:
        if a.explain:
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
                        for p, m in zip(plans, members, strict=True)
                    ],
                }
            )
        else:
            print_json(group)
        return 0
    sources = [shown_sources(m, a.show_secrets, a.executors) for m in members] if a.explain else []
    _print_group(e, group, members, sources, a.executors)
    return 0


def group_request(a: argparse.Namespace) -> GroupRequest:
    """What the group planner is asked, from the command line."""
    ex = a.executors
    members = read_group(a.group, executors=ex)
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
    )


def _flag_tables(req: GroupRequest, hardware_file: str | None) -> dict[str, FlagTable]:
    """The executors' own flag tables, by kind, for --explain's findings, as ``plan
    --explain`` judges one plan: this host's binaries' (their --help, cached), or those a
    `hardware_file` recorded (a dry run for another host runs nothing the file names)."""
    from exedra_engine._shell.local.flag_tables import executor_table

    out: dict[str, FlagTable] = {}
    for kind in dict.fromkeys(m.spec.kind for m in req.members):
        exe = req.hardware.executor(kind) if req.hardware else None
        if exe is None:
            continue
        profile = req.executors.profile(kind)
        table = (
            recorded_table(profile, exe, hardware_file)[0]
            if hardware_file
            else executor_table(profile, exe.path)[0]
        )
        if table is not None:
            out[kind] = table
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
