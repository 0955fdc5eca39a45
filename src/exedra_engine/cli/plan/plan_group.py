"""``exedra-engine plan --group FILE``: plan the members of a group file together on one host
and print each member's plan and the shares (memory, GPU memory, CPUs, threads, port) the
group planner decided; ``--explain`` says why each share is what it is."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import msgspec

from exedra_engine._core.config.findings import failing
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.cpus import cpu_set_text
from exedra_engine._core.group.planner import GroupExplained
from exedra_engine._core.group.values import GroupPlan, MemberShare
from exedra_engine._core.memory.explain import size_text
from exedra_engine._core.plan.explained import Explained
from exedra_engine._shell.config_check import located_configs
from exedra_engine._shell.group_plan import GroupRequest, explain_group_request, read_group
from exedra_engine._shell.hardware_file import read_hardware
from exedra_engine._shell.probe import host_hardware
from exedra_engine.cli.plan.request import recorded_table, shared_constraints
from exedra_engine.cli.render import (
    finding_line,
    findings_summary,
    print_json,
    print_plan,
    shown,
    shown_plan,
)
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
)
"""Options a group file sets per member (or that a group plan does not do): refused."""

HideFindings = Callable[[Explained, bool, Executors], Explained]


def refuse_per_member(a: argparse.Namespace) -> None:
    """Refuse the options a group file sets per member (`EngineError`, naming them); used by
    ``plan --group`` and ``launch --group``."""
    given = [
        flag for dest, flag in _PER_MEMBER if getattr(a, dest, None) not in (None, 0, False, [], "")
    ]
    if given:
        raise EngineError(
            f"{', '.join(given)} do{'es' * (len(given) == 1)} not go with --group: a group "
            "file sets them per member (id, model, kind, ctx, threads, port, args, env, "
            "capabilities, weight)"
        )


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
    plans = [shown_plan(m.plan, a.show_secrets, m.sources, executors=a.executors) for m in members]
    group = msgspec.structs.replace(e.plan, plans=tuple(plans))
    if a.json:
        _print_json(a, e, group, members)
    else:
        _print_group(e, group, members)
    return group_verdict(a, members)


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
                {"id": p.spec.id, "findings": m.findings, "memory": m.memory}
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


def _print_group(e: GroupExplained, group: GroupPlan, members: list[Explained]) -> None:
    g = e.plan
    for i, (plan, share) in enumerate(zip(group.plans, g.shares, strict=True)):
        if i:
            print()
        print(f"member    {shown(share.id)}")
        print_plan(plan)
        print("share     " + _share_text(share))
        if e.shares:  # --explain: the memory arithmetic, the findings of its layers
            for line in e.members[i].memory:
                print(f"          {shown(line)}")
            found = members[i].findings
            print("findings  " + (finding_line(found[0]) if found else "none"))
            for f in found[1:]:
                print(f"          {finding_line(f)}")
    print()
    budget = f"{size_text(g.budget)} of host memory shared" if g.budget else "memory not shared"
    print(f"group     {len(g.shares)} members, {budget}")
    for j, b in enumerate(g.device_budgets):
        print(f"          GPU {j}: {size_text(b)} shared")
    for note in g.notes:
        print(f"note      {shown(note)}")
    if e.shares:
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
