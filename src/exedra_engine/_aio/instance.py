"""One running executor on an asyncio loop, owned by one supervising task.

Its lifecycle, stop, kill and reaping are `exedra_engine._shell.launch.instance`'s; this
module adds asyncio's waiting for the leader's exit and its stand-in for shielding:
asyncio has no shielded scope, so a stop runs as its own task and a cancelled caller waits
for it to finish, then sees its `CancelledError` (`asyncio.timeout` still turns it into
`TimeoutError`). When the supervising task is cancelled (the loop shuts down:
``asyncio.run`` cancels every task at its end) the executor gets the graceful stop before
the task ends.
"""

from __future__ import annotations

import asyncio

from exedra_engine._aio.child import Child
from exedra_engine._aio.logs import Pump
from exedra_engine._aio.loop import LOOP, finish, uncancellable
from exedra_engine._shell.launch.child import ExitReason
from exedra_engine._shell.launch.instance import InstanceState
from exedra_engine.constants import STOP_TIMEOUT


class Instance(InstanceState[Child, Pump]):
    """One running executor process, on an asyncio loop. Create it with `launch` or
    `open_instance`."""

    loop = LOOP

    async def stop(self, timeout: float = STOP_TIMEOUT, *, drain: float = 0.0) -> ExitReason:
        """One SIGTERM to the process group, SIGKILL if it is still running after `timeout`
        seconds. Idempotent, safe after the process died, and it completes even when the
        caller is cancelled meanwhile (the cancellation is raised after). With `drain`,
        first wait up to that many seconds until the executor works on no request
        (llama-server's ``/slots``), so a busy executor is stopped without cutting answers
        off."""
        await uncancellable(self._stopped(timeout, drain))
        assert self.exit_reason is not None
        return self.exit_reason

    async def _stopped(self, timeout: float, drain: float) -> None:
        await self.stop_sequence(timeout, drain=drain)
        await self.wait()

    async def kill(self) -> ExitReason:
        """SIGKILL to the process group now, and wait for its end (a launch that failed or
        was cancelled: no grace, the executor never served anyone)."""
        await uncancellable(self._killed())
        assert self.exit_reason is not None
        return self.exit_reason

    async def _killed(self) -> None:
        await self.kill_sequence()
        await self.wait()

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
        await self._process.exited
        await self.reap()
        # The writer is a task of its own, cancelled with every other one when the loop
        # shuts down: its lines are then lost, never the exit.
        await asyncio.wait({writer})
        if not writer.cancelled():
            writer.exception()
        self.record_exit(self._process.exited.result())
