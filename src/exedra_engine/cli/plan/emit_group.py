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
from exedra_engine.cli.plan.check_group import check_group, unreachable_members
from exedra_engine.cli.render import PROG, shown
from exedra_engine.errors import EmitRefused, EngineError


def run_group_emit(group: GroupPlan, hardware: Hardware | None, a: argparse.Namespace) -> int:
    """Emit `group` for ``a.emit`` (``--check``: check the files instead); the exit status.
    What the plan could not size is a warning, or with ``--strict`` a refusal (exit 2)."""
    from exedra_engine._core.emit import Emitted
    from exedra_engine._core.emit.group.units import DEFAULT_NAME, emit_group_files
    from exedra_engine.cli.emit_out import hand_out, options_from
    from exedra_engine.cli.options import GROUP_ONLY

    _say_unsized(group, a)
    name = a.name or DEFAULT_NAME
    try:
        if a.emit == "router":
            # The command line in the file's head names where the file is written.
            path = os.path.abspath(os.path.join(a.out or ".", f"{name}.ini"))
            emitted = Emitted(files={f"{name}.ini": router_text(group, path, a)}, origins=())
        elif a.emit == "llama-swap":
            from exedra_engine._core.emit.group.llama_swap import llama_swap_file

            file = f"{name}-llama-swap.yaml"
            path = os.path.abspath(os.path.join(a.out or ".", file))
            text = llama_swap_file(
                group, start_budget=a.start_budget, executors=a.executors, path=path
            )
            emitted = Emitted(files={file: text}, origins=())
        else:
            emitted = emit_group_files(
                group, Target(a.emit), options_from(a), hardware, executors=a.executors
            )
            if not a.check and (problems := unreachable_members(group, emitted.files, a)):
                raise EmitRefused(tuple(problems))
    except EmitRefused as refused:
        print_refused(refused)
        return 2
    if a.check:
        return check_group(group, emitted, a)
    # A router preset or a llama-swap file is the whole command line of every member, read
    # by one program, not a unit a system manager must read: private (0600) with --out.
    return hand_out(emitted, a, private=a.emit in GROUP_ONLY)


def print_refused(refused: EmitRefused) -> None:
    """One error line per problem (what the emitter refused), on stderr."""
    for problem in refused.problems:
        print(f"{PROG}: error: {shown(problem)}", file=sys.stderr)


def _say_unsized(group: GroupPlan, a: argparse.Namespace) -> None:
    """A warning per member the plan could not size; with ``--strict`` a refusal (exit 2),
    as ``plan --strict`` refuses a plan with findings."""
    from exedra_engine._core.emit.group.unsized import unsized_members

    unsized = unsized_members(group)
    if not unsized:
        return
    lost = (
        "counts as nothing in the memory plan"
        if a.emit in ("router", "llama-swap")
        else "gets no memory limit"
    )
    lines = [f"member {member} {lost}: {why}" for member, why in unsized]
    if getattr(a, "strict", False):
        raise EngineError(f"--strict: the group plan could not size every member; {lines[0]}")
    for line in lines:
        print(f"{PROG}: warning: {shown(line)}", file=sys.stderr)


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
