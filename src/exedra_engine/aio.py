"""Launching from asyncio: native asyncio, no trio underneath.

``async with open_instance(plan) as inst:`` starts the plan's executor, waits until it is
ready, and stops it when the block ends, also on an error, a cancellation (`asyncio.timeout`,
a `asyncio.TaskGroup` sibling's failure) or the loop's shutdown. `launch` is the unscoped
form: the instance then lives until `Instance.stop` or the end of the loop. The same
guarantees as the trio adapter (`exedra_engine.open_instance`): the executor runs in its own
process group, dies with this process (parent-death signal), and a stop returns only once
the whole group is gone::

    import asyncio
    import exedra_engine as engine
    from exedra_engine import aio

    async def main(plan: engine.LaunchPlan) -> None:
        async with aio.open_instance(plan) as inst:
            print(inst.endpoint.url)

`open_group` starts several executors at once, all or nothing (``running["chat"]`` is one
member's `Instance`), and stops them in parallel.
"""

from __future__ import annotations

from exedra_engine._aio.group import Group, open_group
from exedra_engine._aio.launcher import ExitReason, Instance, Logs, launch, open_instance

__all__ = ["ExitReason", "Group", "Instance", "Logs", "launch", "open_group", "open_instance"]
