"""The trio adapter: start an executor, stream its logs, wait until it is ready, stop it.

What a launch decides lives once, outside this module, for every adapter: the child's set-up
(`_core.launch.child`, carried out by `_shell.child`), log splitting and redaction
(`_core.launch.logs`), the readiness request, its parsing and its deadlines
(`_core.launch.readiness`), the stop sequence
(`_core.launch.stop`). This module and `_trio.instance` run them with trio:

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

import dataclasses
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio
from returns.result import Failure, Result, Success

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.launch.budget import load_limits
from exedra_engine._core.launch.child import child_spec
from exedra_engine._core.launch.logs import log_secrets
from exedra_engine._core.plan.endpoint import resolve
from exedra_engine._core.plan.layers import Source
from exedra_engine._core.values import LaunchPlan, connect_host
from exedra_engine._shell import drive
from exedra_engine._shell.child import ExitReason
from exedra_engine._shell.host import LocalHost
from exedra_engine._shell.ports import ProcessSockets
from exedra_engine._trio import spawn
from exedra_engine._trio.instance import DeliverCancel, Instance, graceful
from exedra_engine._trio.logs import LogPump, Logs
from exedra_engine._trio.ready import LOOP, Nudge, poller
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.errors import EngineError, NotReady

__all__ = ["DeliverCancel", "ExitReason", "Instance", "Logs", "launch", "open_instance"]

PortsReader = drive.PortsReader
_local_ports = drive.local_ports


@dataclasses.dataclass(frozen=True)
class _Options(drive.LaunchOptions[Logs]):
    """The launch's options, and how a cancelled owner stops the child."""

    deliver_cancel: DeliverCancel = graceful


async def launch(
    nursery: trio.Nursery,
    plan: LaunchPlan,
    logs: Logs = None,
    *,
    ready_timeout: float | None = None,
    stall_timeout: float | None = None,
    stop_timeout: float = STOP_TIMEOUT,
    ports: PortsReader = _local_ports,
    sockets: ProcessSockets | None = None,
    deliver_cancel: DeliverCancel = graceful,
    sources: Sequence[Source] = (),
    executors: Executors = BUILTIN,
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
    ones it was planned with).
    """
    try:
        inst = await start_instance(
            nursery,
            plan,
            logs,
            ready_timeout=ready_timeout,
            stall_timeout=stall_timeout,
            stop_timeout=stop_timeout,
            ports=ports,
            sockets=sockets,
            deliver_cancel=deliver_cancel,
            sources=sources,
            executors=executors,
        )
    except EngineError as e:
        return Failure(e)
    return Success(inst)


async def start_instance(
    nursery: trio.Nursery,
    plan: LaunchPlan,
    logs: Logs = None,
    *,
    ready_timeout: float | None = None,
    stall_timeout: float | None = None,
    stop_timeout: float = STOP_TIMEOUT,
    ports: PortsReader = _local_ports,
    sockets: ProcessSockets | None = None,
    deliver_cancel: DeliverCancel = graceful,
    sources: Sequence[Source] = (),
    executors: Executors = BUILTIN,
) -> Instance:
    """`launch` for the library's own callers (the command line): raises the launch's
    `EngineError` instead of returning it."""
    limits = load_limits(plan, ready_timeout, stall_timeout)
    host = sockets or LocalHost()
    opts = _Options(
        logs, limits, stop_timeout, ports, host, tuple(sources), executors, deliver_cancel
    )
    inst: Instance = await nursery.start(_supervise, plan, opts)
    return inst


async def _supervise(
    plan: LaunchPlan,
    opts: _Options,
    *,
    task_status: trio.TaskStatus[Instance] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Start, wait for readiness, report the instance with ``started()``, then own the
    process until it exits. A failure before ``started()`` is raised, so ``start()``
    raises it; a lost scanned port is re-planned (`drive.with_port_retries`)."""

    async def attempt(p: LaunchPlan) -> NotReady | None:
        return await _attempt(p, opts, task_status)

    await drive.with_port_retries(plan, attempt, opts.ports, opts.executors)


async def _attempt(
    plan: LaunchPlan, opts: _Options, task_status: trio.TaskStatus[Instance]
) -> NotReady | None:
    """One start. None once the process has run and exited after ``started()``; the
    readiness failure when it never got there (the child is dead by then)."""
    ex = opts.executors
    drive.before_start(plan, ex)
    r = resolve(plan.spec.kind, plan.args, plan.env, executors=ex)
    nudge = Nudge()
    pump = LogPump(opts.logs, log_secrets(plan, r, executors=ex), nudge.output)
    try:
        process = await spawn.start(child_spec(plan, os.environ, executors=ex))
    except OSError as e:
        raise drive.cannot_start(plan, e) from None
    inst = Instance(
        plan,
        r,
        process,
        pump,
        stop_timeout=opts.stop_timeout,
        deliver_cancel=opts.deliver_cancel,
        on_exit=nudge.set,
        executors=ex,
    )
    assert process.stdout is not None
    failed: NotReady | None = None
    # The body's failures are kept and raised after the nursery: raised inside it, trio
    # would wrap them in an ExceptionGroup the caller did not ask for.
    async with trio.open_nursery() as tasks:
        tasks.start_soon(inst.watch)
        tasks.start_soon(pump.pump, process.stdout)
        tasks.start_soon(pump.write)
        probe = poller(connect_host(r.host), r.port, plan.ready)
        outcome = await drive.await_ready(inst, probe, nudge, opts, LOOP, kill=inst.kill)
        if outcome == "ready":
            task_status.started(inst)
        else:
            failed = await drive.not_ready(
                inst, outcome, opts, LOOP, output_ended_within=inst.output_ended_within
            )
    return failed


@asynccontextmanager
async def open_instance(
    plan: LaunchPlan,
    logs: Logs = None,
    *,
    ready_timeout: float | None = None,
    stall_timeout: float | None = None,
    stop_timeout: float = STOP_TIMEOUT,
    ports: PortsReader = _local_ports,
    sockets: ProcessSockets | None = None,
    deliver_cancel: DeliverCancel = graceful,
    sources: Sequence[Source] = (),
    executors: Executors = BUILTIN,
) -> AsyncIterator[Instance]:
    """``async with open_instance(plan) as inst:`` — ready on entry, stopped on exit, also on
    error or cancellation. Raises the launch's `EngineError` if it cannot start. The
    options are `launch`'s."""
    limits = load_limits(plan, ready_timeout, stall_timeout)
    host = sockets or LocalHost()
    opts = _Options(
        logs, limits, stop_timeout, ports, host, tuple(sources), executors, deliver_cancel
    )
    # The body's exception is carried out of the nursery and raised as itself: raised inside
    # it, trio would wrap it in an ExceptionGroup the caller did not ask for.
    raised: BaseException | None = None
    async with trio.open_nursery() as nursery:
        try:
            inst: Instance = await nursery.start(_supervise, plan, opts)
        except EngineError as e:
            raised = e
        else:
            try:
                yield inst
            except BaseException as e:
                raised = e
            finally:
                await inst.stop(stop_timeout)
    if raised is not None:
        raise raised
