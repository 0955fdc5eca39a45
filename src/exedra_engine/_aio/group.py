"""Launching a group from asyncio: every member's `open_instance` at once, one task each.

The policies are `_core.group.start`'s (all or nothing, the first failure named); this module
gives them asyncio's primitives. Each member is one task holding its own `open_instance`
block, so each member's stop is that block's exit: leaving the group ends every block at
once, and the stops run in parallel, each within `stop_timeout`. The first failure cancels
the other tasks (members still starting are killed, ready ones stopped) and `MemberFailed`
is raised once they are all done, naming the member. A cancelled caller also waits until
every member is gone before it sees its `CancelledError`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Unpack, cast

from exedra_engine._aio.launcher import Instance, Logs, open_instance
from exedra_engine._core.group.start import Group, MemberOptions, Starting
from exedra_engine._core.group.values import GroupPlan
from exedra_engine._shell.group_logs import member_logs

__all__ = ["Group", "GroupLogs", "open_group"]

GroupLogs = Logs | Callable[[str, str], object] | Mapping[str, Logs]
"""A group's ``logs``: a stream (each line prefixed ``id: ``), a callable called as
``logs(member_id, line)``, or a sink per member id (`exedra_engine._shell.group_logs`)."""


@asynccontextmanager
async def open_group(
    group: GroupPlan, logs: GroupLogs = None, **options: Unpack[MemberOptions]
) -> AsyncIterator[Group[Instance]]:
    """``async with open_group(group) as running:`` — the asyncio form of
    `exedra_engine.open_group`: every member at once, all ready on entry (``running["chat"]``
    is that member's `Instance`), all stopped in parallel on exit, also on error or
    cancellation (`asyncio.timeout`, a `TaskGroup` sibling's failure); `MemberFailed`, raised
    once the others are stopped, names a member that could not start. `logs` receives every
    member's lines tagged with its id, as `exedra_engine.open_group`'s. `options` are
    `open_instance`'s, for each member."""
    sinks = member_logs(group.ids, logs)
    start: Starting[Instance] = Starting(group)
    settled, leave = asyncio.Event(), asyncio.Event()
    tasks = [
        asyncio.create_task(
            start.hold(
                name,
                open_instance(plan, cast("Logs", sinks[name]), **options),
                leave.wait,
                all_ready=settled.set,
                first_failure=settled.set,
            ),
            name=f"group member {name}",
        )
        for name, plan in start.members
    ]
    entered = False
    try:
        await settled.wait()
        if start.error is None:
            entered = True
            yield start.group()
    finally:
        leave.set()
        if not entered:  # a member failed, or the caller was cancelled while they started
            for t in tasks:
                t.cancel()
        await _all_done(tasks)
    if start.error is not None:
        raise start.error


async def _all_done(tasks: list[asyncio.Task[None]]) -> None:
    """Wait until every task has ended, even if the caller is cancelled meanwhile (it then
    cancels them, and raises its `CancelledError` once they are done)."""
    cancelled = False
    while not all(t.done() for t in tasks):
        try:
            await asyncio.wait(tasks)
        except asyncio.CancelledError:
            cancelled = True
            for t in tasks:
                t.cancel()
    for t in tasks:
        if not t.cancelled() and (bug := t.exception()) is not None:
            raise bug  # a member's EngineError was recorded by the member itself
    if cancelled:
        raise asyncio.CancelledError
