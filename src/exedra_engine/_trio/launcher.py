"""The trio adapter: start an executor, stream its logs, wait until it is ready, stop it.

What a launch decides lives once, outside this module, for every adapter: the child's set-up
(`_core.child`, carried out by `_shell.child`), log splitting and redaction (`_core.logs`),
the readiness request, its parsing and its deadlines (`_core.readiness`), the stop sequence
(`_core.stop`). This module and `_trio.instance` run them with trio:

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
import functools
import os
import shutil
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Final, Literal

import trio
from returns.result import Failure, Result, Success

from exedra_engine._core import diagnosis
from exedra_engine._core.actual import Actual, actual
from exedra_engine._core.budget import load_limits
from exedra_engine._core.child import child_spec
from exedra_engine._core.endpoint import Resolved, resolve
from exedra_engine._core.executors import executor_profile
from exedra_engine._core.kinds import Kind
from exedra_engine._core.layers import Source
from exedra_engine._core.logs import log_secrets
from exedra_engine._core.planner import next_free_port, with_port
from exedra_engine._core.readiness import LoadLimits, field_at, prefix_of
from exedra_engine._core.redact import refuse_redacted
from exedra_engine._core.values import LaunchPlan, connect_host
from exedra_engine._shell.child import ExitReason, group_peak_rss, signal_name
from exedra_engine._shell.flag_tables import suggest_flag
from exedra_engine._shell.host import LocalHost
from exedra_engine._shell.plan import read_ports_in_use
from exedra_engine._shell.ports import ProcessSockets
from exedra_engine._trio import spawn
from exedra_engine._trio.instance import DeliverCancel, Instance, graceful
from exedra_engine._trio.logs import LogPump, Logs
from exedra_engine._trio.ready import Nudge, Outcome, Poller, get_json, until_ready
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.errors import AddressUnavailable, EngineError, LaunchError, NotReady

__all__ = ["DeliverCancel", "ExitReason", "Instance", "Logs", "launch", "open_instance"]

PORT_RETRIES: Final = 3
"""How many times a scanned port lost to another process is re-planned."""
_LOG_DRAIN: Final = 1.0
"""How long an exit's last lines may take to come through the pipe before it is judged."""
_ACTUAL_WAIT: Final = 2.0
"""How long the executor may take to say what it runs with, once ready."""

PortsReader = Callable[[Kind], frozenset[int]]
"""Which ports an executor of a kind could not bind now (`exedra_engine._shell.plan`)."""


def _local_ports(kind: Kind) -> frozenset[int]:
    return read_ports_in_use(LocalHost(), kind)


@dataclasses.dataclass(frozen=True)
class _Options:
    """What one launch is given besides the plan (kept together through the retries)."""

    logs: Logs
    limits: LoadLimits
    stop_timeout: float
    ports: PortsReader
    sockets: ProcessSockets
    deliver_cancel: DeliverCancel
    sources: tuple[Source, ...]


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
    (default: the local kernel).
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
) -> Instance:
    """`launch` for the library's own callers (the command line): raises the launch's
    `EngineError` instead of returning it."""
    limits = load_limits(plan, ready_timeout, stall_timeout)
    host = sockets or LocalHost()
    opts = _Options(logs, limits, stop_timeout, ports, host, deliver_cancel, tuple(sources))
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
    raises it; a lost scanned port is re-planned a bounded number of times."""
    attempt = plan
    for _ in range(PORT_RETRIES):
        failed = await _attempt(attempt, opts, task_status)
        if failed is None:
            return
        # Another process took the port if it holds it now, or if the executor said so (a
        # holder that has let go since is still why this start failed).
        retry = attempt.port_scanned and failed.returncode is not None
        in_use = opts.ports(attempt.spec.kind) if retry else frozenset()
        lost = attempt.port in in_use or (retry and isinstance(failed, AddressUnavailable))
        nxt = next_free_port(attempt.port + 1, in_use) if lost else None
        if nxt is None:
            raise failed
        attempt = with_port(attempt, nxt)
    failed = await _attempt(attempt, opts, task_status)
    if failed is not None:
        raise failed


async def _attempt(
    plan: LaunchPlan, opts: _Options, task_status: trio.TaskStatus[Instance]
) -> NotReady | None:
    """One start. None once the process has run and exited after ``started()``; the
    readiness failure when it never got there (the child is dead by then)."""
    refuse_redacted(plan)
    r = resolve(plan.spec.kind, plan.args, plan.env)
    nudge = Nudge()
    pump = LogPump(opts.logs, log_secrets(plan, r), nudge.output)
    # Checked here because with a setpriv prefix a missing binary would only show as
    # setpriv's own exit status.
    if shutil.which(plan.command) is None:
        raise LaunchError(f"{plan.command}: cannot start: not an executable file")
    try:
        process = await spawn.start(child_spec(plan, os.environ))
    except OSError as e:
        raise LaunchError(f"{plan.command}: cannot start: {e.strerror or e}") from None
    inst = Instance(
        plan,
        r,
        process,
        pump,
        stop_timeout=opts.stop_timeout,
        deliver_cancel=opts.deliver_cancel,
        on_exit=nudge.set,
    )
    assert process.stdout is not None
    failed: NotReady | None = None
    # The body's failures are kept and raised after the nursery: raised inside it, trio
    # would wrap them in an ExceptionGroup the caller did not ask for.
    async with trio.open_nursery() as tasks:
        tasks.start_soon(inst.watch)
        tasks.start_soon(pump.pump, process.stdout)
        tasks.start_soon(pump.write)
        poller = Poller(connect_host(r.host), r.port, plan.ready)
        try:
            outcome = await until_ready(
                poller,
                inst.has_exited,
                nudge,
                limits=opts.limits,
                sockets=opts.sockets,
                pid=inst.pid,
            )
        except BaseException:
            await inst.kill()  # cancelled while waiting: the child goes first
            raise
        finally:
            inst.ready_connections = poller.connections
            await poller.close()
        if outcome == "ready":
            inst.ready_at = trio.current_time()
            inst.actual = await _actual(inst, r)
            task_status.started(inst)
        else:
            await inst.kill()
            failed = await _not_ready(inst, r, opts, outcome)
    return failed


async def _actual(inst: Instance, r: Resolved) -> Actual:
    """What the executor really did: its context (asked), its group's peak memory (/proc)."""
    plan = inst.plan
    profile = executor_profile(plan.spec.kind)
    ctx = None
    if profile.props_path:
        path = prefix_of(plan.ready, profile.ready_path) + profile.props_path
        props = await get_json(connect_host(r.host), r.port, path, r.api_key, _ACTUAL_WAIT)
        ctx = field_at(props, profile.props_ctx)
    peak = await trio.to_thread.run_sync(group_peak_rss, inst.pid)
    return actual(plan, profile, ctx, peak)


async def _not_ready(inst: Instance, r: Resolved, opts: _Options, outcome: Outcome) -> NotReady:
    """The typed failure: a timeout or stall as it stands, an exit classified by the
    profile's patterns once the log has been read to its end."""
    plan, reason = inst.plan, inst.exit_reason
    if outcome != "exited" or reason is None:
        kind: Literal["timeout", "stalled"] = "stalled" if outcome == "stalled" else "timeout"
        seconds = opts.limits.stall if kind == "stalled" else opts.limits.budget
        tail = inst.log_tail
        return diagnosis.not_answering(
            kind, command=plan.command, path=plan.ready, url=r.url, seconds=seconds, log=tail
        )
    with trio.move_on_after(_LOG_DRAIN):
        await inst.output_ended()
    sig = reason.signal
    ended = diagnosis.Exit(
        command=plan.command,
        returncode=reason.returncode,
        how=reason.describe(),
        signal=signal_name(sig) if sig else "",
        log=inst.log_tail,
        host=r.host,
        port=r.port,
    )
    profile = executor_profile(plan.spec.kind)
    # In a worker thread: a refused flag's did-you-mean reads the installed binary's table.
    suggest = functools.partial(suggest_flag, profile, plan.command)
    classify = functools.partial(
        diagnosis.classify, ended, profile, sources=opts.sources, memory=plan.memory
    )
    return await trio.to_thread.run_sync(classify, suggest)


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
) -> AsyncIterator[Instance]:
    """``async with open_instance(plan) as inst:`` — ready on entry, stopped on exit, also on
    error or cancellation. Raises the launch's `EngineError` if it cannot start. The
    options are `launch`'s."""
    limits = load_limits(plan, ready_timeout, stall_timeout)
    host = sockets or LocalHost()
    opts = _Options(logs, limits, stop_timeout, ports, host, deliver_cancel, tuple(sources))
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
