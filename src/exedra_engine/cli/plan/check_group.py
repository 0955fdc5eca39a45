"""``--check`` of a group's files (``plan --group FILE --emit TARGET --check``, ``emit
GROUP.json --target TARGET --check``), with the meaning it has for one plan's: the files in
``--out DIR`` (else the ones just emitted) are read back and judged against the plan, every
member's by its own plan (`check_files`, what it cannot reach on this host, Kubernetes'
schema), naming the member; exit 1 when anything is wrong. What a member's unit cannot reach
on this host (`unreachable_members`) refuses the emit, and is one more finding of ``--check``.

The router's preset and the llama-swap file have no checker of their own: each must be the
file the plan emits, byte for byte."""

from __future__ import annotations

import argparse

from exedra_engine._core.emit import Emitted
from exedra_engine._core.group.values import GroupPlan
from exedra_engine._core.targets import Target
from exedra_engine.cli.emit_out import checked, k8s_schema_problems, read_back


def check_group(group: GroupPlan, emitted: Emitted, a: argparse.Namespace) -> int:
    """Check the group's files for ``a.emit`` as the module says; the exit status."""
    files, drift = read_back(a.out, emitted.files) if a.out else (emitted.files, [])
    if a.emit in ("router", "llama-swap"):
        problems = [f"{name} differs from what the plan emits" for name in drift]
        return checked(files, [], problems, a.emit)
    from exedra_engine._core.emit.checks import check_files
    from exedra_engine._core.emit.group.cluster import deployed_plan
    from exedra_engine._core.emit.group.units import DEFAULT_NAME, member_name

    target = Target(a.emit)
    name = a.name or DEFAULT_NAME
    problems = []
    for share, plan in zip(group.shares, group.plans, strict=True):
        stem = member_name(name, share.id)
        own = {f: text for f, text in files.items() if f.rpartition(".")[0] == stem}
        deployed = deployed_plan(plan, target, a.executors)
        found = check_files(deployed, target, own, executors=a.executors)
        problems += [f"member {share.id}: {p}" for p in found]
    problems += unreachable_members(group, files, a)
    if target is Target.K8S:
        problems += k8s_schema_problems(files)
    return checked(files, drift, problems, target.value)


def unreachable_members(
    group: GroupPlan, files: dict[str, str], a: argparse.Namespace
) -> list[str]:
    """What each member's systemd unit or Quadlet container cannot reach on this host (its
    executor, waiter and models: `exedra_engine._shell.local.path_modes.unreachable`, as ``plan
    --emit`` judges a single plan's), naming the member."""
    from exedra_engine._core.emit.group.units import DEFAULT_NAME, member_name
    from exedra_engine._shell.local.path_modes import unreachable

    target = Target(a.emit)
    name = a.name or DEFAULT_NAME
    out: list[str] = []
    for share, plan in zip(group.shares, group.plans, strict=True):
        stem = member_name(name, share.id)
        own = {f: text for f, text in files.items() if f.rpartition(".")[0] == stem}
        out += [f"member {share.id}: {p}" for p in unreachable(plan, target, own, a.executors)]
    return out
