"""``launch --group FILE --router``: the group's llama members as one llama.cpp router, and
every member the router cannot serve (whisper-server is no router child) started beside it.

What the router serves and what it does not is said before anything starts
(`exedra_engine._core.emit.group.router_scope`); the ready lines give one curl command per
model the router serves, each naming it (``"model": "chat"``: the router answers 400
without it). The router alone runs as ``launch`` runs one executor; with members beside it,
the router and those members run as one group (all or nothing, one ready line each)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence

import msgspec

from exedra_engine._core.emit.group.router import RouterPreset, router_plan, router_preset
from exedra_engine._core.emit.group.router_scope import (
    beside_router,
    beside_texts,
    served_text,
)
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.values import GroupPlan, MemberShare
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine.cli.launch.launch_output import curl_command
from exedra_engine.cli.launch.launch_run import run_launch
from exedra_engine.cli.render import PROG, shown
from exedra_engine.cli.signals import Signals
from exedra_engine.errors import EmitRefused

RunGroup = Callable[..., int]
"""`exedra_engine.cli.launch.launch_group.run_group_launch`, handed in (that module
imports this one)."""


def launch_router(
    group: GroupPlan, a: argparse.Namespace, sigs: Signals, run_group: RunGroup
) -> int:
    """Run `group`'s llama members as one llama-server in router mode, its preset written to
    a private directory for the life of the command, ready when ``/models`` answers; the
    members it cannot serve beside it (`run_group`, with the router as one member)."""
    from exedra_engine.cli.plan.emit_group import print_refused

    try:
        preset = router_preset(group, executors=a.executors)
    except EmitRefused as refused:  # a secret the preset would carry: exit 2, nothing started
        print_refused(refused)
        return 2
    for line in preset.dropped:
        print(f"{PROG}: note: dropped {shown(line)}", file=sys.stderr)
    said = sys.stderr if a.json else sys.stdout  # --json: stdout holds JSON lines only
    print(f"router    serves {shown(served_text(preset))}", file=said)
    for text in beside_texts(group, preset, executors=a.executors):
        print(f"beside    {shown(text)}", file=said)
    said.flush()
    with tempfile.TemporaryDirectory(prefix="exedra-router-") as d:
        path = os.path.join(d, "router.ini")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(preset.text)
        plan = router_plan(group, path, preset, executors=a.executors)
        tries = router_tries(group, preset, plan, a.executors)
        beside = beside_router(group, preset)
        if not beside:
            return run_launch(plan, a, sigs, tries=tries)
        both, name = with_router(group, plan, preset)
        return run_group(both, a, sigs, tries=_beside_tries(both, name, tries, a.executors))


def router_tries(
    group: GroupPlan, preset: RouterPreset, router: LaunchPlan, executors: Executors
) -> list[str]:
    """One curl command per member the router serves, at the router's address, each asking
    what that member serves (its capabilities) and naming it as the ``"model"``; the key,
    if any, is the router's."""
    # The router's key is its first member's (`router_plan`): named by that member's variable.
    key_env = router.key_env or group.plan_of(preset.members[0]).key_env
    out = []
    for member in preset.members:
        own = msgspec.structs.replace(
            group.plan_of(member), api_key=router.api_key, key_env=key_env
        )
        if curl := curl_command(own, router.url, executors, model=member):
            out.append(curl)
    return out


def with_router(
    group: GroupPlan, router: LaunchPlan, preset: RouterPreset
) -> tuple[GroupPlan, str]:
    """The group that runs: the router (named ``router``, or ``llama-router`` when a member
    is named so) in place of the members it serves, then the members it does not serve,
    with their own plans and shares; and the router's name."""
    beside = beside_router(group, preset)
    name = "router" if "router" not in beside else "llama-router"
    served = [s for s in group.shares if s.id in preset.members]
    share = MemberShare(
        id=name,
        port=router.port,
        memory=sum(s.memory for s in served),
        resident=sum(s.resident for s in served),
    )
    shares = (share, *(s for s in group.shares if s.id in beside))
    plans = (router, *(group.plan_of(m) for m in beside))
    return msgspec.structs.replace(group, plans=plans, shares=shares), name


def _beside_tries(
    group: GroupPlan, router: str, tries: Sequence[str], executors: Executors
) -> Mapping[str, Sequence[str]]:
    """The router's curl commands, and each member's beside it: its own."""
    out: dict[str, Sequence[str]] = {router: tries}
    for share, plan in zip(group.shares[1:], group.plans[1:], strict=True):
        out[share.id] = [c] if (c := curl_command(plan, plan.url, executors)) else []
    return out
