"""``exedra-engine launch``: run a plan until Ctrl-C or SIGTERM, then stop it cleanly."""

from __future__ import annotations

import argparse
import signal
import sys

import trio

from exedra_engine._core.values import LaunchPlan
from exedra_engine._trio.launcher import open_instance


def run_launch(plan: LaunchPlan, a: argparse.Namespace) -> int:
    """Launch `plan`, print its endpoint, forward its logs to stderr, stop it on a signal.

    Exit status: 0 when it was stopped cleanly, 1 when it crashed; an executor that never
    became ready raises its `EngineError` (the command line's exit-status table says 1).
    """
    return trio.run(_main, plan, a)


async def _main(plan: LaunchPlan, a: argparse.Namespace) -> int:
    from exedra_engine.cli.render import json_text, shown, shown_plan

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_instance(
            plan, sys.stderr.buffer, ready_timeout=a.ready_timeout, stop_timeout=a.stop_timeout
        ) as inst:
            if a.json:
                body = {
                    "url": inst.endpoint.url,
                    "pid": inst.pid,
                    "plan": shown_plan(inst.plan, a.show_secrets),
                }
                sys.stdout.write(json_text(body, indent=False) + "\n")
            else:
                print(f"ready     {shown(inst.endpoint.url)}  (pid {inst.pid}); Ctrl-C stops it")
            sys.stdout.flush()

            async with trio.open_nursery() as nursery:

                async def on_signal() -> None:
                    async for _ in signals:
                        await inst.stop(a.stop_timeout)
                        return

                nursery.start_soon(on_signal)
                await inst.wait()
                nursery.cancel_scope.cancel()
    reason = inst.exit_reason
    assert reason is not None
    print(f"stopped   {reason.describe()}", file=sys.stderr)
    return 0 if reason.clean else 1
