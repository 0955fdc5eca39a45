"""The trio adapter: start an executor, stream its logs, wait until it is ready, stop it.

What a launch decides lives once, outside this module, for every adapter: the child's set-up
(`_core.launch.child`, carried out by `_shell.launch.child`), log splitting and redaction
(`_core.launch.logs`), the readiness request, its parsing and its deadlines
(`_core.launch.readiness`), the stop sequence
(`_core.launch.stop`), and the one start sequence that runs them
(`_shell.launch`). This module and `_trio.instance` give it trio's primitives:

- `launch` and `open_instance` start the child outside the nursery and report it with
  ``task_status.started`` once ready, as trio's own ``run_process`` does; if the launch fails
  or is cancelled the child is killed first.
- A scanned port that another process took between planning and binding is re-planned to
  the next free port, a bounded number of times; an explicit port is never moved.
- `Instance.stop` sends one SIGTERM to the group, then SIGKILL when the timeout expires; it
  is shielded from the caller's cancellation and returns when the exit is observed (pidfd),
  not on a polling tick. When the owning nursery is cancelled under a running child,
  `deliver_cancel` stops it (trio's ``run_process`` parameter; the default is the same stop).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Unpack

import trio
from returns.result import Failure, Result, Success

from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._shell.launch import start
from exedra_engine._shell.launch.child import ExitReason
from exedra_engine._shell.launch.loop import News
from exedra_engine._shell.launch.options import LaunchOptions, Options, PortsReader
from exedra_engine._shell.launch.tree import Started
from exedra_engine._trio import spawn
from exedra_engine._trio.groups import ungrouped
from exedra_engine._trio.instance import DeliverCancel, Instance, graceful
from exedra_engine._trio.logs import LogPump, Logs
from exedra_engine._trio.loop import LOOP
from exedra_engine.errors import EngineError

__all__ = [
    "DeliverCancel",
    "ExitReason",
    "Instance",
    "Logs",
    "PortsReader",
    "launch",
    "open_instance",
]


async def launch(
    nursery: trio.Nursery,
    plan: LaunchPlan,
    logs: Logs = None,
    *,
    deliver_cancel: DeliverCancel = graceful,
    **options: Unpack[Options],
) -> Result[Instance, EngineError]:
    """Start the plan's executor in `nursery` and wait until its ready path answers 200.

    The endpoint is read back from the plan's args and env. `logs` receives the executor's
    stdout and stderr line by line (a text or binary file, or a trio stream). The wait is
    bounded by `ready_timeout` (default: `load_budget` of the plan's files), by
    `stall_timeout` seconds without output (default `budget.STALL`) and by the caller's
    deadlines; on failure, timeout or cancellation the child is killed before this returns or
    raises, as a `NotReady` subclass that says why (`sources`, the plan's provenance from
    `explain_launch`, name the layer of a refused flag). The instance is
    supervised by one task in `nursery` (started with ``nursery.start``): when the nursery
    is cancelled, `deliver_cancel` stops the child (default: `graceful`, with
    `stop_timeout`). `ports` says which ports are taken when a scanned port was lost to
    another process between planning and binding; `sockets` which process listens on a port
    (default: the local kernel). `executors` are those the plan's kind is looked up in (the
    ones it was planned with). The options are `LaunchOptions`' fields.
    """
    try:
        inst = await start_instance(nursery, plan, logs, deliver_cancel=deliver_cancel, **options)
    except EngineError as e:
        return Failure(e)
    return Success(inst)


async def start_instance(
    nursery: trio.Nursery,
    plan: LaunchPlan,
    logs: Logs = None,
    *,
    deliver_cancel: DeliverCancel = graceful,
    **options: Unpack[Options],
) -> Instance:
    """`launch` for the library's own callers (the command line): raises the launch's
    `EngineError` instead of returning it."""
    opts = LaunchOptions[Logs].of(logs, **options)
    async with ungrouped():
        inst: Instance = await nursery.start(_supervise, plan, opts, deliver_cancel)
    return inst


async def _supervise(
    plan: LaunchPlan,
    opts: LaunchOptions[Logs],
    deliver_cancel: DeliverCancel,
    *,
    task_status: trio.TaskStatus[Instance] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The start sequence (`start.sequence`) in this task: the instance is reported with
    ``started()`` once ready, and this task owns the process until it exits. A failure
    before ``started()`` is raised, so ``start()`` raises it."""
    await start.sequence(plan, opts, _Starter(opts, deliver_cancel, task_status))


class _Starter:
    """trio's instances for the start sequence (`start.Starter`)."""

    loop = LOOP

    def __init__(
        self,
        opts: LaunchOptions[Logs],
        deliver_cancel: DeliverCancel,
        task_status: trio.TaskStatus[Instance],
    ) -> None:
        self._opts, self._deliver_cancel, self._task_status = opts, deliver_cancel, task_status

    def instance(
        self, prepared: start.Prepared, started: Started, news: News
    ) -> tuple[Instance, Sequence[start.Task]]:
        opts, process = self._opts, spawn.child(started)
        pump = LogPump(opts.logs, prepared.secrets, news.output)
        inst = Instance(
            prepared.plan,
            prepared.resolved,
            process,
            pump,
            stop_timeout=opts.stop_timeout,
            deliver_cancel=self._deliver_cancel,
            on_exit=news.set,
            executors=opts.executors,
        )
        return inst, (inst.supervise, functools.partial(pump.pump, process.stdout), pump.write)

    def ready(self, inst: Instance) -> None:
        self._task_status.started(inst)


@asynccontextmanager
async def open_instance(
    plan: LaunchPlan,
    logs: Logs = None,
    *,
    deliver_cancel: DeliverCancel = graceful,
    **options: Unpack[Options],
) -> AsyncIterator[Instance]:
    """``async with open_instance(plan) as inst:`` — ready on entry, stopped on exit, also on
    error or cancellation. Raises the launch's `EngineError` if it cannot start. The
    options are `launch`'s."""
    opts = LaunchOptions[Logs].of(logs, **options)
    # The body's exception is carried out of the nursery and raised as itself: raised inside
    # it, trio would wrap it in an ExceptionGroup the caller did not ask for.
    raised: BaseException | None = None
    async with ungrouped(), trio.open_nursery() as nursery:
        try:
            inst: Instance = await nursery.start(_supervise, plan, opts, deliver_cancel)
        except EngineError as e:
            raised = e
        else:
            try:
                yield inst
            except BaseException as e:
                raised = e
            finally:
                await inst.stop(opts.stop_timeout)
    if raised is not None:
        raise raised
