"""The run of ``launch`` once planned: start the executor under trio, print its endpoint,
forward its logs, stop it on a signal (the phases: cli/launch.py)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import IO, Final

import trio

from exedra_engine._core.launch.budget import load_limits
from exedra_engine._core.plan.layers import Source
from exedra_engine._core.values import LaunchPlan
from exedra_engine._trio.launcher import Instance, start_instance
from exedra_engine.cli.signals import SIGNALS, Signals, interrupted_exit
from exedra_engine.errors import EngineError

PROGRESS_EVERY: Final = 10.0
"""Seconds between our own ``loading`` lines while the executor loads its model."""


def run_launch(
    plan: LaunchPlan, a: argparse.Namespace, sigs: Signals, sources: Sequence[Source] = ()
) -> int:
    """Launch `plan`, print its endpoint, forward its logs, stop it on a signal.

    Exit status: 0 when it was stopped cleanly, 1 when it crashed or never became ready,
    128+N when signal N came before it was ready (nothing is left running).
    """
    sigs.raising = False
    if sigs.first is not None:
        return interrupted_exit(sigs.first, "planning", "nothing was started")
    log_file: IO[bytes] | None = None
    if a.log_file:
        from exedra_engine._shell.files import open_append

        try:
            # Never blocking: signals are only recorded from here on, so an open(2) of a FIFO
            # waiting for a reader would be retried after each, for good.
            log_file = open_append(a.log_file)
        except OSError as e:  # unwritable: checked at parse for what could be
            from exedra_engine.cli.render import fail
            from exedra_engine.errors import LaunchError

            return fail(LaunchError(f"--log-file: cannot open it: {e.strerror or e}"))
    try:
        return trio.run(_main, plan, a, sigs, log_file, tuple(sources))
    finally:
        if log_file is not None:
            log_file.close()


async def _main(
    plan: LaunchPlan,
    a: argparse.Namespace,
    sigs: Signals,
    log_file: IO[bytes] | None,
    sources: tuple[Source, ...],
) -> int:
    from exedra_engine.cli.render import PROG, json_text, shown, shown_plan
    from exedra_engine.cli.render import fail as _fail

    logs = log_file if log_file is not None else None if a.quiet else sys.stderr.buffer
    inst: Instance | None = None
    with trio.open_signal_receiver(*SIGNALS) as signals:
        async with trio.open_nursery() as nursery:
            phase = trio.CancelScope()
            nursery.start_soon(sigs.cancel_on, signals, phase)
            if sigs.first is not None:  # between planning and here
                phase.cancel()
            with phase:
                failed: EngineError | None = None
                async with trio.open_nursery() as progress:
                    budget = load_limits(plan, a.ready_timeout).budget
                    progress.start_soon(_progress, plan, budget)
                    try:
                        started = await start_instance(
                            nursery,
                            plan,
                            logs,
                            ready_timeout=a.ready_timeout,
                            stop_timeout=a.stop_timeout,
                            sources=sources,
                            executors=a.executors,
                        )
                    except EngineError as err:
                        failed = err
                    progress.cancel_scope.cancel()
                if failed is not None:
                    nursery.cancel_scope.cancel()
                    return _fail(failed, 1, as_json=a.json)
                inst = started
                if a.json:
                    body = {
                        "url": started.endpoint.url,
                        "pid": started.pid,
                        "plan": shown_plan(started.plan, a.show_secrets, executors=a.executors),
                        "actual": started.actual,
                    }
                    sys.stdout.write(json_text(body, indent=False) + "\n")
                else:
                    url = shown(started.endpoint.url)
                    print(f"ready     {url}  (pid {started.pid}); Ctrl-C stops it")
                sys.stdout.flush()
                for warning in started.actual.warnings if started.actual else ():
                    print(f"{PROG}: warning: {shown(warning)}", file=sys.stderr)
                await started.wait()
            if inst is not None:
                await inst.stop(
                    a.stop_timeout, drain=a.drain
                )  # shielded; at once if it already exited
            nursery.cancel_scope.cancel()
    if inst is None:
        assert sigs.first is not None
        return interrupted_exit(sigs.first, "starting", "the executor was stopped")
    reason = inst.exit_reason
    assert reason is not None
    print(f"stopped   {reason.describe()}", file=sys.stderr)
    return 0 if reason.clean else 1


async def _progress(plan: LaunchPlan, timeout: float) -> None:
    """A line of our own every `PROGRESS_EVERY` seconds of a long load, so a silent load
    (or one whose logs --quiet dropped) does not look hung."""
    from exedra_engine.cli.render import shown

    name = shown(plan.command.rsplit("/", 1)[-1])
    waited = 0.0
    while True:
        await trio.sleep(PROGRESS_EVERY)
        waited += PROGRESS_EVERY
        print(
            f"loading   {name} has not answered {plan.ready} yet: {waited:g} s of "
            f"--ready-timeout {timeout:g} s",
            file=sys.stderr,
            flush=True,
        )
