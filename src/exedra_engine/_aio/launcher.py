"""The asyncio adapter: start an executor, stream its logs, wait until it is ready, stop it.

Native asyncio, no trio underneath. What a launch decides lives once, outside this package,
for every adapter: the child's set-up (`_core.launch.child`, carried out by
`_shell.launch.child` on its one spawner thread, so the parent-death signal outlives any
worker thread), log splitting and redaction (`_core.launch.logs`), the readiness request
and deadlines (`_core.launch.readiness`), the stop sequence (`_core.launch.stop`), and the
one start sequence that runs them (`_shell.launch`). This package only gives it asyncio's
primitives (`_aio.loop`), the exit on a pidfd (`_aio.child`), the log pipe read by the loop
(`_aio.logs`), and the supervising task (`_aio.instance`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Unpack

from returns.result import Failure, Result, Success

from exedra_engine._aio.child import Child
from exedra_engine._aio.instance import Instance
from exedra_engine._aio.logs import Logs, Pump
from exedra_engine._aio.loop import LOOP
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._shell.launch import start
from exedra_engine._shell.launch.child import ExitReason
from exedra_engine._shell.launch.loop import News
from exedra_engine._shell.launch.options import LaunchOptions, Options
from exedra_engine._shell.launch.tree import Started
from exedra_engine.errors import EngineError

__all__ = ["ExitReason", "Instance", "Logs", "launch", "open_instance"]


async def _start(plan: LaunchPlan, opts: LaunchOptions[Logs]) -> Instance:
    """The start sequence (`start.sequence`): the instance once ready, left to its supervising
    task; raises `NotReady` (the child is dead by then) or the caller's cancellation (the
    child is killed first)."""
    return await start.sequence(plan, opts, _Starter(opts))


class _Starter:
    """asyncio's instances for the start sequence (`start.Starter`)."""

    loop = LOOP

    def __init__(self, opts: LaunchOptions[Logs]) -> None:
        self._opts = opts

    def instance(
        self, prepared: start.Prepared, started: Started, news: News
    ) -> tuple[Instance, Sequence[start.Task]]:
        opts, loop = self._opts, asyncio.get_running_loop()
        popen, out, tree = started
        inst = Instance(
            prepared.plan,
            prepared.resolved,
            Child(popen, tree, loop),
            Pump(loop, out, opts.logs, prepared.secrets, news.output),
            stop_timeout=opts.stop_timeout,
            on_exit=news.set,
            executors=opts.executors,
        )
        return inst, (inst.supervise,)

    def ready(self, inst: Instance) -> None:
        pass  # `_start` returns it


async def launch(
    plan: LaunchPlan, logs: Logs = None, **options: Unpack[Options]
) -> Result[Instance, EngineError]:
    """Start the plan's executor and wait until its ready path answers 200.

    The endpoint is read back from the plan's args and env. `logs` receives the executor's
    stdout and stderr line by line (a text or binary file, or an asyncio `StreamWriter`).
    The wait is bounded by `ready_timeout` (default: the load budget of the plan's files),
    by `stall_timeout` seconds without output (default `budget.STALL`) and by the caller's
    deadlines (`asyncio.timeout`, cancellation); on failure, timeout or cancellation the
    child is killed before this returns or raises, as a `NotReady` subclass that says why
    (`sources`, the plan's provenance from `explain_launch`, name the layer of a refused
    flag). The running instance is owned by a task on the running loop: call
    `Instance.stop`, or the loop's shutdown stops it (`stop_timeout` of grace). `ports`
    says which ports are taken when a scanned port was lost between planning and binding;
    `sockets` which process listens on a port (default: the local kernel). `executors` are
    those the plan's kind is looked up in (the ones it was planned with). The options are
    `LaunchOptions`' fields.
    """
    try:
        inst = await _start(plan, LaunchOptions[Logs].of(logs, **options))
    except EngineError as e:
        return Failure(e)
    return Success(inst)


@asynccontextmanager
async def open_instance(
    plan: LaunchPlan, logs: Logs = None, **options: Unpack[Options]
) -> AsyncIterator[Instance]:
    """``async with open_instance(plan) as inst:`` — ready on entry, stopped on exit, also on
    error or cancellation (`asyncio.timeout`, a `TaskGroup` sibling's failure). Raises the
    launch's `EngineError` if it cannot start. The options are `launch`'s."""
    opts = LaunchOptions[Logs].of(logs, **options)
    inst = await _start(plan, opts)
    try:
        yield inst
    finally:
        await inst.stop(opts.stop_timeout)
