"""One start sequence for every adapter (trio's ``_subprocess_platform`` idea: the order
written once, the platform a few primitives): the checks before a start and the child's
set-up (`prepare`), one start's wait and verdict (`become_ready`), one start in its order
(`attempt`: prepare, fork, the instance and the tasks that own it, the wait for
readiness), and the port re-planning around the starts (`with_port_retries`, `sequence`).
An adapter hands its primitives (`loop.Loop`) and its kind of instance (`Starter`)."""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.launch.child import ChildSpec, child_spec
from exedra_engine._core.launch.logs import log_secrets
from exedra_engine._core.launch.redacted import refuse_redacted
from exedra_engine._core.plan.endpoint import Resolved
from exedra_engine._core.plan.launch_plan import LaunchPlan, read_plan
from exedra_engine._core.plan.ports import next_free_port, with_port
from exedra_engine._shell.launch.failure import not_ready
from exedra_engine._shell.launch.instance import InstanceState
from exedra_engine._shell.launch.loop import Loop, News
from exedra_engine._shell.launch.options import LaunchOptions
from exedra_engine._shell.launch.ready import await_ready
from exedra_engine._shell.launch.tree import Started
from exedra_engine.errors import AddressUnavailable, LaunchError, NotReady

I = TypeVar("I", bound=InstanceState[Any, Any])  # noqa: E741 - an adapter's Instance

Task = Callable[[], Awaitable[object]]
"""A task that owns an instance (its supervision, its log pump)."""

PORT_RETRIES = 3
"""How many times a scanned port lost to another process is re-planned."""


class Prepared(NamedTuple):
    """What one start is made of before anything runs."""

    plan: LaunchPlan
    resolved: Resolved
    """The endpoint, read back from the plan's args and env."""
    secrets: tuple[str, ...]
    """What the log relay hides."""
    spec: ChildSpec
    """The child to spawn."""


def before_start(plan: LaunchPlan, executors: Executors = BUILTIN) -> None:
    """What every start checks before it starts anything: a plan that carries the
    redaction marker is refused (`refuse_redacted`), and a command that is not an
    executable raises `LaunchError` (with a setpriv prefix it would only show as setpriv's
    own exit status)."""
    refuse_redacted(plan, executors=executors)
    if shutil.which(plan.command) is None:
        raise LaunchError(f"{plan.command}: cannot start: not an executable file")


def prepare(plan: LaunchPlan, executors: Executors = BUILTIN) -> Prepared:
    """`before_start`, then the start's endpoint, log secrets and child."""
    before_start(plan, executors)
    r = read_plan(plan, executors).resolved()
    secrets = log_secrets(plan, r, executors=executors)
    return Prepared(plan, r, secrets, child_spec(plan, os.environ, executors=executors))


def cannot_start(plan: LaunchPlan, e: OSError) -> LaunchError:
    """The error for a fork or exec that failed."""
    return LaunchError(f"{plan.command}: cannot start: {e.strerror or e}")


async def become_ready(
    inst: InstanceState[Any, Any], news: News, opts: LaunchOptions[Any], loop: Loop
) -> NotReady | None:
    """One start's wait for readiness: None once `inst` is ready; else the typed failure
    (`not_ready`), `inst` killed by then. A cancellation meanwhile kills it, then
    propagates."""
    limits = opts.limits(inst.plan)
    tick = None
    if opts.on_progress is not None:
        from exedra_engine._shell.launch.load_progress import ProgressFeed

        tick = ProgressFeed(inst.plan, opts.on_progress).tick
    outcome = await await_ready(inst, news, limits, opts.process_sockets(), loop, tick=tick)
    if outcome == "ready":
        return None
    return await not_ready(inst, outcome, limits, opts, loop)


async def with_port_retries(
    plan: LaunchPlan,
    attempt: Callable[[LaunchPlan], Awaitable[NotReady | None]],
    opts: LaunchOptions[Any],
) -> None:
    """Run `attempt` (None: it became ready and has run) and, when a scanned port was lost
    to another process between planning and binding (the executor exited, and the ports in
    use say the port is taken, or the executor said it could not bind), again on the next
    free port, at most `PORT_RETRIES` times; an explicit port is never moved. Raises the
    last failure."""
    for _ in range(PORT_RETRIES):
        failed = await attempt(plan)
        if failed is None:
            return
        # Another process took the port if it holds it now, or if the executor said so (a
        # holder that has let go since is still why this start failed).
        retry = plan.port_scanned and failed.returncode is not None
        in_use = opts.ports_in_use(plan.spec.kind) if retry else frozenset()
        lost = plan.port in in_use or (retry and isinstance(failed, AddressUnavailable))
        nxt = next_free_port(plan.port + 1, in_use) if lost else None
        if nxt is None:
            raise failed
        # Raises when the argv cannot take the new port.
        plan = with_port(plan, nxt, executors=opts.executors)
    failed = await attempt(plan)
    if failed is not None:
        raise failed


class Starter(Protocol[I]):
    """What one launch needs of its adapter besides its `Loop`: its kind of instance over a
    started child, and how a ready one is reported."""

    @property
    def loop(self) -> Loop:
        """The adapter's primitives."""
        ...

    def instance(
        self, prepared: Prepared, started: Started, news: News
    ) -> tuple[I, Sequence[Task]]:
        """The adapter's instance over the `started` child (its exit and output telling
        `news`), and the tasks that own it for its life."""
        ...

    def ready(self, inst: I) -> None:
        """`inst` is ready: tell whoever waits for the start (trio's ``task_status``)."""
        ...


async def attempt(
    plan: LaunchPlan, opts: LaunchOptions[Any], starter: Starter[I]
) -> tuple[I, NotReady | None]:
    """One start, in the order every adapter follows: `prepare`, the fork (never abandoned
    half-way: `Loop.spawn`), the instance and its own tasks, the wait for readiness
    (`become_ready`) while they run (`Loop.run_owned`), the instance reported ready. The
    instance, and None once it was ready (on trio, once it has also run and exited), or
    why it never was (it is dead by then)."""
    prepared = prepare(plan, opts.executors)
    loop = starter.loop
    news = News(loop)
    try:
        started = await loop.spawn(functools.partial(opts.spawn, prepared.spec))
    except OSError as e:
        raise cannot_start(plan, e) from None
    inst, tasks = starter.instance(prepared, started, news)

    async def wait() -> NotReady | None:
        failed = await become_ready(inst, news, opts, loop)
        if failed is None:
            starter.ready(inst)
        return failed

    return inst, await loop.run_owned(tasks, wait)


async def sequence(plan: LaunchPlan, opts: LaunchOptions[Any], starter: Starter[I]) -> I:
    """The start sequence: `attempt`, on the next free port when a scanned port was lost
    (`with_port_retries`); the last instance, or the last failure raised."""
    last: list[I] = []

    async def one(p: LaunchPlan) -> NotReady | None:
        inst, failed = await attempt(p, opts, starter)
        last.append(inst)
        return failed

    await with_port_retries(plan, one, opts)
    return last[-1]
