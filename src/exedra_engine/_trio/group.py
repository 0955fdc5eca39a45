"""Launching a group with trio: every member's `open_instance` at once, in one nursery.

The policies are `_core.group.start`'s (all or nothing, the first failure named); this module
gives them trio's primitives. Each member is one task holding its own `open_instance` block,
so each member's stop is that block's exit: leaving the group leaves every block at once,
and the stops run in parallel, each within `stop_timeout`. The first failure cancels the
nursery: members still starting are killed, ready ones stopped, and then `MemberFailed` is
raised, naming the member.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Unpack, cast

import trio

from exedra_engine._core.group.start import Group, MemberOptions, Starting
from exedra_engine._core.group.values import GroupPlan
from exedra_engine._shell.group_logs import member_logs
from exedra_engine._trio.groups import ungrouped
from exedra_engine._trio.launcher import Instance, Logs, open_instance

__all__ = ["Group", "GroupLogs", "open_group"]

GroupLogs = Logs | Callable[[str, str], object] | Mapping[str, Logs]
"""A group's ``logs``: a stream (each line prefixed ``id: ``), a callable called as
``logs(member_id, line)``, or a sink per member id (`exedra_engine._shell.group_logs`)."""


@asynccontextmanager
async def open_group(
    group: GroupPlan, logs: GroupLogs = None, **options: Unpack[MemberOptions]
) -> AsyncIterator[Group[Instance]]:
    """``async with open_group(group) as running:`` — every member started at once, all ready
    on entry (``running["chat"]`` is that member's `Instance`), all stopped in parallel on
    exit, also on error or cancellation. If a member cannot start, the others are stopped
    first and `MemberFailed` is raised, naming it, with its own error as the cause. `logs`
    receives every member's lines, each tagged with its member's id (`GroupLogs`: a stream
    gets ``chat: <line>``, a callable ``logs("chat", line)``; a mapping gives each member its
    own sink); `options` (``ready_timeout``, ``stall_timeout``,
    ``stop_timeout``, ``executors``) are `open_instance`'s, for each member."""
    sinks = member_logs(group.ids, logs)
    start: Starting[Instance] = Starting(group)
    all_ready, leave = trio.Event(), trio.Event()
    raised: BaseException | None = None
    # The body's exception is carried out of the nursery and raised as itself: raised inside
    # it, trio would wrap it in an ExceptionGroup the caller did not ask for; so is a Ctrl-C
    # during the load (`ungrouped`), a plain KeyboardInterrupt as in a single launch.
    async with ungrouped(), trio.open_nursery() as nursery:
        for name, plan in start.members:
            opened = open_instance(plan, cast("Logs", sinks[name]), **options)
            nursery.start_soon(
                functools.partial(
                    start.hold,
                    name,
                    opened,
                    leave.wait,
                    all_ready=all_ready.set,
                    first_failure=nursery.cancel_scope.cancel,
                )
            )
        await all_ready.wait()
        try:
            yield start.group()
        except BaseException as e:
            raised = e
        finally:
            leave.set()
    if start.error is not None:
        raise start.error
    if raised is not None:
        raise raised
