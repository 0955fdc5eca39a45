"""One running executor, owned by the launch that started it (`exedra_engine._trio.launcher`).

It only runs the stop policy of `exedra_engine._core.launch.stop`: one SIGTERM to the process
group, SIGKILL at the deadline, the group reaped before a stop returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.launch import stop as policy
from exedra_engine._core.plan.endpoint import Resolved
from exedra_engine._core.values import LaunchPlan
from exedra_engine._shell.child import ExitReason
from exedra_engine._shell.instance import InstanceState
from exedra_engine._trio import spawn
from exedra_engine._trio.logs import LogPump
from exedra_engine._trio.ready import LOOP
from exedra_engine._trio.stop import group_gone, run_steps
from exedra_engine.constants import STOP_TIMEOUT

DeliverCancel = Callable[["Instance"], Awaitable[object]]
"""Stops a running instance whose owning nursery is cancelled (trio's ``deliver_cancel``):
run while the exit is awaited, and cancelled once it comes; SIGKILL follows if it returns
with the executor still running."""


async def graceful(inst: Instance) -> None:
    """The default `DeliverCancel`: one SIGTERM, SIGKILL after ``inst.stop_timeout``."""
    await run_steps(policy.stop_steps(inst.stop_timeout), inst.send_signal, trio.sleep_forever)


class Instance(InstanceState):
    """One running executor process. Create it with `launch` or `open_instance`."""

    def __init__(
        self,
        plan: LaunchPlan,
        resolved: Resolved,
        process: spawn.Child,
        pump: LogPump,
        *,
        stop_timeout: float = STOP_TIMEOUT,
        deliver_cancel: DeliverCancel = graceful,
        on_exit: Callable[[], None] = lambda: None,
        executors: Executors = BUILTIN,
    ) -> None:
        super().__init__(
            plan, resolved, process.pid, pump, stop_timeout=stop_timeout, executors=executors
        )
        self._on_exit = on_exit
        self._process = process
        self._pump = pump
        self._exited = trio.Event()
        self._deliver_cancel = deliver_cancel
        self.started_at = trio.current_time()

    async def output_ended_within(self, seconds: float) -> bool:
        """Whether the executor's output has been read to its end within `seconds`."""
        with trio.move_on_after(seconds):
            await self._pump.ended.wait()
            return True
        return False

    async def wait(self) -> None:
        """Return when the process has exited."""
        await self._exited.wait()

    async def stop(self, timeout: float = STOP_TIMEOUT, *, drain: float = 0.0) -> ExitReason:
        """One SIGTERM to the process group, SIGKILL if it is still running after `timeout`
        seconds. Idempotent, safe after the process died, and it completes even while the
        caller's scope is being cancelled. With `drain`, first wait up to that many seconds
        until the executor works on no request (llama-server's ``/slots``), so a busy
        executor is stopped without cutting answers off."""
        with trio.CancelScope(shield=True):
            await self.stop_sequence(timeout, LOOP, self._gone_within, drain=drain)
        assert self._exit is not None
        return self._exit

    async def kill(self) -> ExitReason:
        """SIGKILL to the process group now, and wait for its end (a launch that failed or
        was cancelled: no grace, the executor never served anyone)."""
        with trio.CancelScope(shield=True):
            await self.kill_sequence(self._gone_within)
        assert self._exit is not None
        return self._exit

    async def _gone_within(self, seconds: float) -> bool:
        with trio.move_on_after(seconds):
            await self._exited.wait()
            return True
        return False

    async def watch(self) -> None:
        """Own the process until it exits (run by the launch, once, in its nursery); when
        cancelled under a running child, stop it by `deliver_cancel`."""
        try:
            await self._process.wait()
        except trio.Cancelled:
            # The caller's nursery is going away under a running child: it must not outlive
            # it. deliver_cancel runs while the exit is awaited, as in trio's run_process.
            with trio.CancelScope(shield=True):
                self._stop_requested = True
                async with trio.open_nursery() as n:
                    n.start_soon(self._deliver_then_kill)
                    await self._process.wait()
                    n.cancel_scope.cancel()
            raise
        finally:
            with trio.CancelScope(shield=True):
                await self.reap_sequence(self._group_gone_within)
            code = self._process.returncode
            assert code is not None
            self._ended(code)
            self._exited.set()
            self._on_exit()

    async def _deliver_then_kill(self) -> None:
        await self._deliver_cancel(self)
        self.send_signal(policy.KILL)

    async def _group_gone_within(self, seconds: float) -> bool:
        with trio.move_on_after(seconds):
            await group_gone(self.pid)
            return True
        return False
