"""The run of ``launch --group FILE``: every member checked as ``launch`` checks its one plan
(nothing started when one is refused), then started at once under trio
(`exedra_engine.open_group`), each member's ready lines once all are, each member's log
kept in its own file or tagged with its id, all stopped together on a signal or when one
of them exits.

The phases are `launch`'s (cli/launch/__init__.py): a signal while the members start stops them all
and exits 128+N; a member that cannot start stops the others and the command exits 1 with
one line naming it (`MemberFailed`); a signal while they serve stops them all in parallel
(exit 0 when every stop was clean); a member that exits on its own stops the others (exit 1).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from functools import partial
from typing import IO

import trio

from exedra_engine._core.config.findings import TableOrigin
from exedra_engine._core.group.planner import GroupExplained
from exedra_engine._core.group.start import Group
from exedra_engine._core.group.values import GroupPlan
from exedra_engine._trio.group import GroupLogs, open_group
from exedra_engine._trio.launcher import Instance
from exedra_engine.cli.launch.launch_output import LogSink, log_sink, ready_lines
from exedra_engine.cli.signal_scope import signal_phase
from exedra_engine.cli.signals import Signals, interrupted_exit
from exedra_engine.errors import (
    ArgumentRefused,
    EngineError,
    LaunchError,
    MemberFailed,
)


def launch_group(a: argparse.Namespace, sigs: Signals) -> int:
    """``launch --group FILE`` (``--router``: as one llama.cpp router): plan the group as
    ``plan --group`` does, check every member as ``launch`` checks its one plan (nothing is
    started when one fails: exit 2, the member named), then run it. A group plan saved with
    ``plan --group --json`` is run as saved (reviewed, then deployed: nothing is probed or
    planned again)."""
    from exedra_engine._shell.group_plan import explain_group_request
    from exedra_engine.cli.plan.plan_group import group_request, member_tables
    from exedra_engine.cli.plan.saved_plan import saved_group
    from exedra_engine.cli.render import PROG

    saved = saved_group(a.group)
    if saved is not None:
        from exedra_engine.cli.plan.saved_plan import keyed_again, refuse_replanning

        refuse_replanning(a, a.group)
        group = keyed_again(saved, a.group, os.environ)
        if a.router:
            return _router(group, a, sigs)
        return run_group_launch(group, a, sigs)
    req = group_request(a, launching=True)
    if a.hardware:
        print(
            f"{PROG}: note: --hardware {a.hardware}: the members' shares (memory, CPUs, "
            "threads) are planned for the host that file describes; the executors run here",
            file=sys.stderr,
        )
    if a.router:
        return _router(explain_group_request(req, explain=False).plan, a, sigs)
    tables = member_tables(req, a.hardware)
    flags = {k: t for k, (t, _) in tables.items() if t is not None}
    e = explain_group_request(req, flags=flags)
    refused = _judged(a, e, {k: o for k, (_, o) in tables.items()}, req.origins)
    if refused is not None:
        return refused
    return run_group_launch(e.plan, a, sigs)


def _judged(
    a: argparse.Namespace,
    e: GroupExplained,
    origins: dict[str, TableOrigin],
    where: Sequence[str],
) -> int | None:
    """As ``launch`` judges its one plan, each member: exit 2 (said, the member named) when
    the binary it runs cannot be run here or its own table refuses a flag, and nothing is
    started; else None, each member's errors and warnings summed up in one line."""
    from exedra_engine.cli.launch.launch_output import not_runnable_here, refusal
    from exedra_engine.cli.plan import hide_findings
    from exedra_engine.cli.render import PROG, fail, findings_summary, shown

    warnings: list[str] = []
    for i, member in enumerate(e.members):
        name = where[i] if i < len(where) else f"member {member.plan.spec.id}"
        if why := not_runnable_here(member.plan.command):
            err = EngineError(
                f"{name}: its executor {member.plan.command} {why} on this host; nothing was "
                "started"
                + (
                    " (the --hardware file names another host's binary: name one here "
                    "with --executor PATH or executor: in the group file)"
                    if a.hardware
                    else ""
                )
            )
            return fail(err, 2, as_json=a.json)
        m = hide_findings(member, a.show_secrets, a.executors)
        origin = origins[m.plan.spec.kind]
        if refused := refusal(m.findings, origin):
            err = ArgumentRefused(f"{name}: {refused}")
            err.flag, err.layer, err.suggestion = refused.flag, refused.layer, refused.suggestion
            return fail(err, 2, as_json=a.json)  # a usage error: nothing started
        if any(f.severity != "note" for f in m.findings):  # notes alone are no warning
            warnings.append(
                f"{PROG}: warning: {shown(name)}: {findings_summary(m.findings)} in what its "
                f"plan passes on, judged by {origin.describe()}; plan --group --explain lists "
                "them"
            )
    for w in warnings:
        print(w, file=sys.stderr)
    return None


def _router(group: GroupPlan, a: argparse.Namespace, sigs: Signals) -> int:
    """``--router``: `launch_router`, which refuses a preset that would carry a secret."""
    from exedra_engine.cli.launch.launch_router import launch_router

    return launch_router(group, a, sigs, run_group_launch)


def run_group_launch(
    group: GroupPlan,
    a: argparse.Namespace,
    sigs: Signals,
    *,
    tries: Mapping[str, Sequence[str]] | None = None,
) -> int:
    """Launch every member of `group`, print what each serves once all are ready (under a
    member named in `tries`, those curl commands instead of its own), and stop them all on
    a signal or when one exits. Each member's log goes where ``launch`` sends its one log
    (`log_sink`): on a terminal (or with ``--quiet``) a kept file per member, named on its
    ready lines; else on stderr, each line prefixed with its member's id; with
    ``--log-file``, that file, prefixed too. Exit status: 0 when all were stopped cleanly,
    1 when a member could not start or ended on its own, 128+N for signal N before all
    were ready (nothing is left running)."""
    sigs.raising = False
    if sigs.first is not None:
        return interrupted_exit(sigs.first, "planning", "nothing was started")
    from exedra_engine.cli.launch.launch_run import open_log
    from exedra_engine.cli.render import fail

    sinks = {s.id: log_sink(a, p) for s, p in zip(group.shares, group.plans, strict=True)}
    opened: list[IO[bytes]] = []
    try:
        logs: GroupLogs
        if a.log_file:
            opened.append(open_log(a.log_file, "--log-file"))
            logs = opened[0]  # one file for all: each line tagged with its member's id
        elif any(s.path for s in sinks.values()):
            files: dict[str, IO[bytes]] = {}
            for name, s in sinks.items():
                files[name] = open_log(s.path, f"the log {s.path}", fresh=True)
                opened.append(files[name])
            logs = files
        else:
            logs = sys.stderr.buffer
        return trio.run(partial(_main, group, a, sigs, logs, sinks, tries=tries or {}))
    except LaunchError as e:
        return fail(e)
    finally:
        for f in opened:
            f.close()


async def _main(
    group: GroupPlan,
    a: argparse.Namespace,
    sigs: Signals,
    logs: GroupLogs,
    sinks: dict[str, LogSink],
    *,
    tries: Mapping[str, Sequence[str]],
) -> int:
    from exedra_engine.cli.render import PROG, fail, shown

    running: Group[Instance] | None = None
    failed: MemberFailed | None = None
    ended: list[str] = []
    async with signal_phase(sigs) as phase:
        with phase:
            try:
                async with open_group(
                    group,
                    logs,
                    ready_timeout=a.ready_timeout,
                    stop_timeout=a.stop_timeout,
                    executors=a.executors,
                ) as running:
                    _print_ready(running, a, sinks, tries)
                    ended.append(await _first_exit(running))
            except MemberFailed as e:
                failed = e
    if failed is not None:
        path = sinks[failed.member].path if failed.member in sinks else ""
        if path and not a.json:
            print(f"{PROG}: {shown(failed.member)}'s whole log: {path}", file=sys.stderr)
        return fail(failed, 1, as_json=a.json)
    if running is None:
        assert sigs.first is not None
        return interrupted_exit(sigs.first, "starting", "every member was stopped")
    clean = True
    for name, inst in running.items():
        reason = inst.exit_reason
        assert reason is not None
        why = " (exited on its own first)" if ended and ended[0] == name else ""
        print(f"stopped   {shown(name)}  {reason.describe()}{why}", file=sys.stderr)
        clean = clean and reason.clean and not why
    return 0 if clean else 1


def _print_ready(
    running: Group[Instance],
    a: argparse.Namespace,
    sinks: dict[str, LogSink],
    tries: Mapping[str, Sequence[str]],
) -> None:
    """Each member's ready lines as ``launch`` prints its one (endpoint, memory planned, a
    curl command, where its log is), then one line for the group; with ``--json``, one
    object per member."""
    from exedra_engine.cli.render import PROG, json_text, memory_lines, shown

    width = max(len(inst.plan.spec.id or inst.plan.spec.path) for inst in running.values())
    for name, inst in running.items():
        sink = sinks[name]
        if a.json:
            body: dict[str, object] = {"id": name, "url": inst.endpoint.url, "pid": inst.pid}
            if sink.path:
                body["log"] = sink.path
            sys.stdout.write(json_text(body, indent=False) + "\n")
            continue
        plan = inst.plan
        for line in ready_lines(
            plan,
            url=inst.endpoint.url,
            pid=inst.pid,
            sink=sink,
            executors=a.executors,
            memory=memory_lines(plan.memory) if plan.memory else [],
            stops="",
            tries=tries.get(name),
            width=width,
        ):
            print(shown(line))
    if not a.json:
        print(f"all {len(running)} ready; Ctrl-C stops them")
    sys.stdout.flush()
    for name, inst in running.items():
        for warning in inst.actual.warnings if inst.actual else ():
            print(f"{PROG}: warning: {shown(name)}: {shown(warning)}", file=sys.stderr)


async def _first_exit(running: Group[Instance]) -> str:
    """The id of the first member whose process exits (the others are then stopped)."""
    first: list[str] = []
    async with trio.open_nursery() as n:

        async def wait(name: str, inst: Instance) -> None:
            await inst.wait()
            first.append(name)
            n.cancel_scope.cancel()

        for name, inst in running.items():
            n.start_soon(wait, name, inst)
    return first[0]
