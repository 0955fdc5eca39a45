"""Launching a group from blocking code: ``with run_group(group) as running:``.

The asyncio adapter's `open_group` run on a private loop (`_blocking.bridge`, as `run` runs
`open_instance`): its policies (every member at once, all or nothing, the first failure
named, the stops in parallel) are that adapter's, and the caller's thread only waits.
"""

from __future__ import annotations

import asyncio
from contextlib import AbstractAsyncContextManager
from typing import Unpack

from exedra_engine._aio import group as aio_group
from exedra_engine._aio import launcher as aio
from exedra_engine._aio.group import GroupLogs
from exedra_engine._blocking.bridge import Bridged
from exedra_engine._blocking.run import Instance
from exedra_engine._core.group.start import Group, MemberOptions
from exedra_engine._core.group.values import GroupPlan
from exedra_engine._shell.group_logs import member_logs

__all__ = ["Group", "RunningGroup", "run_group"]


class RunningGroup(Bridged[Group[aio.Instance], Group[Instance]]):
    """The context manager `run_group` returns: every member ready on entry, all stopped on
    exit."""

    def __init__(
        self, group: GroupPlan, logs: GroupLogs = None, **options: Unpack[MemberOptions]
    ) -> None:
        member_logs(group.ids, logs)  # a shape the lines cannot be given to: TypeError now
        self._group = group
        self._logs = logs
        self._options = options

    def _open(self) -> AbstractAsyncContextManager[Group[aio.Instance]]:
        return aio_group.open_group(self._group, self._logs, **self._options)

    async def _kill(self, inner: Group[aio.Instance]) -> object:
        return await asyncio.gather(*(inst.kill() for inst in inner.values()))

    def _wrap(self, inner: Group[aio.Instance], loop: asyncio.AbstractEventLoop) -> Group[Instance]:
        return inner.map(lambda inst: Instance(inst, loop))


def run_group(
    group: GroupPlan, logs: GroupLogs = None, **options: Unpack[MemberOptions]
) -> RunningGroup:
    """``with run_group(group) as running:`` — start every member at once and block until all
    are ready (``running["chat"]`` is that member's `Instance`); the block's end stops them
    all in parallel, each within ``stop_timeout``, also on an exception or Ctrl-C. If a
    member cannot start, the others are stopped first and `MemberFailed` is raised, naming
    it. `logs` receives every member's lines tagged with its id (a stream: ``chat: <line>``;
    a callable: ``logs("chat", line)``, on the adapter's thread). `options`
    (``ready_timeout``, ``stall_timeout``, ``stop_timeout``, ``executors``) are
    `run`'s, for each member."""
    return RunningGroup(group, logs, **options)
