"""One running executor, owned by the launch that started it (`exedra_engine._trio.launcher`).

Its lifecycle, stop, kill and reaping are `exedra_engine._shell.launch.instance`'s (shielded
by `TrioLoop.shielded`); this module adds trio's supervision: the wait for the leader's exit
on a pidfd, and ``deliver_cancel`` when the owning nursery is cancelled.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Unpack

import trio

from exedra_engine._core.launch import stop as policy
from exedra_engine._core.plan.endpoint import Resolved
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._shell.launch.instance import InstanceState, Settings
from exedra_engine._trio import spawn
from exedra_engine._trio.logs import LogPump
from exedra_engine._trio.loop import LOOP

DeliverCancel = Callable[["Instance"], Awaitable[object]]
"""Stops a running instance whose owning nursery is cancelled (trio's ``deliver_cancel``):
run while the exit is awaited, and cancelled once it comes; SIGKILL follows if it returns
with the executor still running."""


async def graceful(inst: Instance) -> None:
    """The default `DeliverCancel`: one SIGTERM, SIGKILL after ``inst.stop_timeout``."""
    await inst.deliver_stop()


class Instance(InstanceState[spawn.Child, LogPump]):
    """One running executor process. Create it with `launch` or `open_instance`."""

    loop = LOOP

    def __init__(
        self,
        plan: LaunchPlan,
        resolved: Resolved,
        process: spawn.Child,
        pump: LogPump,
        *,
        deliver_cancel: DeliverCancel = graceful,
        **kw: Unpack[Settings],
    ) -> None:
        super().__init__(plan, resolved, process, pump, **kw)
        self._deliver_cancel = deliver_cancel

    async def supervise(self) -> None:
        """Own the process until it exits (run by the launch, once, in its nursery); when
        cancelled under a running child, stop it by `deliver_cancel`."""
        try:
            await self._process.wait()
        except trio.Cancelled:
            # The caller's nursery is going away under a running child: it must not outlive
            # it. deliver_cancel runs while the exit is awaited, as in trio's run_process.
            with trio.CancelScope(shield=True):
                self.owner_gone()
                async with trio.open_nursery() as n:
                    n.start_soon(self._deliver_then_kill)
                    await self._process.wait()
                    n.cancel_scope.cancel()
            raise
        finally:
            code = self._process.returncode
            assert code is not None
            with trio.CancelScope(shield=True):
                await self.reap(code)
            self.record_exit(code)

    async def _deliver_then_kill(self) -> None:
        await self._deliver_cancel(self)
        self.send_signal(policy.KILL)
