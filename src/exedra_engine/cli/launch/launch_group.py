"""The run of ``launch --group FILE`` once planned: every member started at once under trio
(`exedra_engine.open_group`), one ``ready`` line per member once all are, their logs
forwarded, all stopped together on a signal or when one of them exits.

The phases are `launch`'s (cli/launch/__init__.py): a signal while the members start stops them all
and exits 128+N; a member that cannot start stops the others and the command exits 1 with
one line naming it (`MemberFailed`); a signal while they serve stops them all in parallel
(exit 0 when every stop was clean); a member that exits on its own stops the others (exit 1).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import IO

import trio

from exedra_engine._core.group.start import Group
from exedra_engine._core.group.values import GroupPlan
from exedra_engine._trio.group import open_group
from exedra_engine._trio.launcher import Instance
from exedra_engine.cli.signal_scope import signal_phase
from exedra_engine.cli.signals import Signals, interrupted_exit
from exedra_engine.errors import LaunchError, MemberFailed


def launch_group(a: argparse.Namespace, sigs: Signals) -> int:
    """``launch --group FILE`` (``--router``: as one llama.cpp router): plan the group as
    ``plan --group`` does, then run it."""
    from exedra_engine._shell.group_plan import explain_group_request
    from exedra_engine.cli.plan.plan_group import group_request

    group = explain_group_request(group_request(a), explain=False).plan
    if a.router:
        from exedra_engine.cli.launch.launch_router import launch_router

        return launch_router(group, a, sigs, run_group_launch)
    return run_group_launch(group, a, sigs)


def run_group_launch(
    group: GroupPlan,
    a: argparse.Namespace,
    sigs: Signals,
    *,
    tries: Mapping[str, Sequence[str]] | None = None,
) -> int:
    """Launch every member of `group`, print one line each once all are ready (and under a
    member named in `tries`, its curl commands), and stop them all on a signal or when one
    exits. Exit status: 0 when all were stopped cleanly,
    1 when a member could not start or ended on its own, 128+N for signal N before all
    were ready (nothing is left running)."""
    sigs.raising = False
    if sigs.first is not None:
        return interrupted_exit(sigs.first, "planning", "nothing was started")
    log_file: IO[bytes] | None = None
    if a.log_file:
        from exedra_engine.cli.launch.launch_run import open_log

        try:
            log_file = open_log(a.log_file, "--log-file")
        except LaunchError as e:
            from exedra_engine.cli.render import fail

            return fail(e)
    try:
        return trio.run(_main, group, a, sigs, log_file, tries or {})
    finally:
        if log_file is not None:
            log_file.close()


async def _main(
    group: GroupPlan,
    a: argparse.Namespace,
    sigs: Signals,
    log_file: IO[bytes] | None,
    tries: Mapping[str, Sequence[str]],
) -> int:
    from exedra_engine.cli.render import fail, shown

    logs = log_file if log_file is not None else None if a.quiet else sys.stderr.buffer
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
                    _print_ready(running, a.json, tries)
                    ended.append(await _first_exit(running))
            except MemberFailed as e:
                failed = e
    if failed is not None:
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
    running: Group[Instance], as_json: bool, tries: Mapping[str, Sequence[str]]
) -> None:
    from exedra_engine.cli.render import json_text, shown

    width = max(len(shown(name)) for name in running)  # the URLs in one column
    for name, inst in running.items():
        if as_json:
            body = {"id": name, "url": inst.endpoint.url, "pid": inst.pid}
            sys.stdout.write(json_text(body, indent=False) + "\n")
        else:
            url = shown(inst.endpoint.url)
            print(f"ready     {shown(name):<{width}}  {url}  (pid {inst.pid})")
            for t in tries.get(name, ()):
                print(f"try       {shown(t)}")
    if not as_json:
        print(f"all {len(running)} ready; Ctrl-C stops them")
    sys.stdout.flush()


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
