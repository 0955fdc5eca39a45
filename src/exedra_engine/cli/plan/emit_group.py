"""``plan --group FILE --emit TARGET``: a group plan's files. Targets: ``systemd``,
``quadlet`` and ``k8s`` (every member's files with its share, tied together), ``router``
(llama.cpp's models preset for the llama members) and ``llama-swap`` (a llama-swap config);
to stdout, or with ``--out DIR`` into DIR, as ``plan --emit`` does."""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from exedra_engine._core.group.values import GroupPlan
from exedra_engine._core.targets import Target
from exedra_engine._core.values import Hardware
from exedra_engine.cli.render import PROG, shown
from exedra_engine.errors import EmitError, EmitRefused

GROUP_ONLY = ("router", "llama-swap")
"""Emit targets for a group only: one executor per member has nothing to route or swap."""


def run_group_emit(group: GroupPlan, hardware: Hardware | None, a: argparse.Namespace) -> int:
    """Emit `group` for ``a.emit``; the exit status."""
    from exedra_engine._core.emit import Emitted
    from exedra_engine._core.emit.group.units import DEFAULT_NAME, emit_group_files
    from exedra_engine.cli.emit import hand_out, options_from

    if a.check:
        raise EmitError(
            "--check reads the files of one plan; a group's files are checked as emitted"
        )
    name = a.name or DEFAULT_NAME
    if a.emit == "router":
        # The command line in the file's head names where the file is written.
        path = os.path.abspath(os.path.join(a.out or ".", f"{name}.ini"))
        emitted = Emitted(files={f"{name}.ini": router_text(group, path, a)}, origins=())
    elif a.emit == "llama-swap":
        from exedra_engine._core.emit.group.llama_swap import dump, llama_swap_config

        config = llama_swap_config(group, start_budget=a.start_budget, executors=a.executors)
        emitted = Emitted(files={f"{name}-llama-swap.yaml": dump(config)}, origins=())
    else:
        try:
            emitted = emit_group_files(
                group, Target(a.emit), options_from(a), hardware, executors=a.executors
            )
            if problems := unreachable_members(group, emitted.files, a):
                raise EmitRefused(tuple(problems))
        except EmitRefused as refused:
            for problem in refused.problems:
                print(f"{PROG}: error: {shown(problem)}", file=sys.stderr)
            return 2
    return hand_out(emitted, a)


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


def router_text(group: GroupPlan, path: str, a: argparse.Namespace) -> str:
    """The preset, headed by the router's command line; what the lint dropped on stderr."""
    from exedra_engine._core.emit.group.router import router_plan, router_preset
    from exedra_engine._core.emit.group.router_scope import beside_texts, served_text

    preset = router_preset(group, executors=a.executors)
    plan = router_plan(group, path, preset, executors=a.executors)
    for line in preset.dropped:
        print(f"{PROG}: note: dropped {shown(line)}", file=sys.stderr)
    # Said before anything runs, on stderr and in the file: a member left out is named.
    scope = [f"the router serves {served_text(preset)}"]
    scope += beside_texts(group, preset, executors=a.executors)
    for line in scope:
        print(f"{PROG}: note: {shown(line)}", file=sys.stderr)
    run = shlex.join([plan.command, *plan.args])
    head = (
        f"; run: {run}\n"
        f"; --models-max {preset.models_max}: the most members that always fit the memory "
        "budget together, largest first\n"
    ) + "".join(f"; {line}\n" for line in scope)
    return head + preset.text
