"""One start sequence for every adapter (httpx's ``BaseClient`` idea: the logic here, the
transport in the adapter): the checks before a start and the child's set-up (`prepare`),
one start's wait and verdict (`become_ready`), and the port re-planning around the starts
(`with_port_retries`). An adapter only spawns, owns the process while it runs, and hands
its primitives (`loop.Loop`)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.launch.child import ChildSpec, child_spec
from exedra_engine._core.launch.logs import log_secrets
from exedra_engine._core.launch.redacted import refuse_redacted
from exedra_engine._core.plan.endpoint import Resolved
from exedra_engine._core.plan.ports import next_free_port, with_port
from exedra_engine._core.plan.reading import read_plan
from exedra_engine._core.values import LaunchPlan
from exedra_engine._shell.launch.failure import not_ready
from exedra_engine._shell.launch.instance import InstanceState
from exedra_engine._shell.launch.loop import Loop, News
from exedra_engine._shell.launch.options import LaunchOptions
from exedra_engine._shell.launch.ready import await_ready
from exedra_engine.errors import AddressUnavailable, LaunchError, NotReady

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
