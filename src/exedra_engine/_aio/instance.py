"""One running executor on an asyncio loop, owned by one supervising task.

Its lifecycle, stop, kill and reaping are `exedra_engine._shell.launch.instance`'s, shielded
by asyncio's stand-in (`AioLoop.shielded`: asyncio has no shielded scope, so a stop runs as
its own task and a cancelled caller waits for it to finish, then sees its `CancelledError`;
`asyncio.timeout` still turns it into `TimeoutError`); this module adds asyncio's
supervision: the wait for the leader's exit. When the supervising task is cancelled (the
loop shuts down: ``asyncio.run`` cancels every task at its end) the executor gets the
graceful stop before the task ends.
"""

from __future__ import annotations

import asyncio

from exedra_engine._aio.child import Child
from exedra_engine._aio.logs import Pump
from exedra_engine._aio.loop import LOOP, finish
from exedra_engine._shell.launch.instance import InstanceState


class Instance(InstanceState[Child, Pump]):
    """One running executor process, on an asyncio loop. Create it with `launch` or
    `open_instance`."""

    loop = LOOP

    async def supervise(self) -> None:
        """Own the process until it exits and its tree is gone (one task per instance);
        when cancelled under a running child, stop it gracefully first."""
        writer = asyncio.ensure_future(self._lines.write())
        try:
            await asyncio.shield(self._process.exited)
        except asyncio.CancelledError:
            # The owner is going away (the loop shuts down) under a running child: it must
            # not outlive it, and gets the same stop as stop(), ended by the leader's exit.
            self.owner_gone()
            leader = self._process.leader_exited
            await finish(self.stop_sequence(self.stop_timeout, until=leader))
            raise
        finally:
            await finish(self._release(writer))

    async def _release(self, writer: asyncio.Future[None]) -> None:
        await self.reap(await self._process.exited)
        # The writer is a task of its own, cancelled with every other one when the loop
        # shuts down: its lines are then lost, never the exit.
        await asyncio.wait({writer})
        if not writer.cancelled():
            writer.exception()
        self.record_exit(self._process.exited.result())
