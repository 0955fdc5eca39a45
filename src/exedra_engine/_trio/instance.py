"""One running executor, owned by the launch that started it (`exedra_engine._trio.launcher`).

It only runs the stop policy of `exedra_engine._core.stop`: one SIGTERM to the process
group, SIGKILL at the deadline, the group reaped before a stop returns.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import trio

from exedra_engine._core import stop as policy
from exedra_engine._core.actual import Actual
from exedra_engine._core.endpoint import Resolved
from exedra_engine._core.executors import executor_profile
from exedra_engine._core.readiness import prefix_of, slots_busy
from exedra_engine._core.values import Endpoint, LaunchPlan, connect_host
from exedra_engine._shell.child import ExitReason, group_alive, signal_group
from exedra_engine._trio import spawn
from exedra_engine._trio.logs import LogPump
from exedra_engine._trio.ready import get_json
from exedra_engine._trio.stop import group_gone, run_steps
from exedra_engine.constants import STOP_TIMEOUT

_DRAIN_POLL: Final = 0.1

DeliverCancel = Callable[["Instance"], Awaitable[object]]
"""Stops a running instance whose owning nursery is cancelled (trio's ``deliver_cancel``):
run while the exit is awaited, and cancelled once it comes; SIGKILL follows if it returns
with the executor still running."""


async def graceful(inst: Instance) -> None:
    """The default `DeliverCancel`: one SIGTERM, SIGKILL after ``inst.stop_timeout``."""
    await run_steps(policy.stop_steps(inst.stop_timeout), inst.send_signal, trio.sleep_forever)


class Instance:
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
    ) -> None:
        self._plan = plan
        self._on_exit = on_exit
        self._resolved = resolved
        self._process = process
        self._pump = pump
        self._exited = trio.Event()
        self._sent: frozenset[str] = frozenset()
        self._stop_requested = False
        self._exit: ExitReason | None = None
        self._deliver_cancel = deliver_cancel
        self.started_at = trio.current_time()
        self.ready_at: float | None = None
        self.ready_connections = 0
        """TCP connections the readiness poll opened (one, unless the executor closed it)."""
        self.actual: Actual | None = None
        """What the executor really runs with, read once it was ready (None before)."""
        self.stop_timeout = stop_timeout
        """The grace period used when the owning nursery is cancelled under a running child."""

    @property
    def endpoint(self) -> Endpoint:
        """The instance's address and API key."""
        return Endpoint(url=self._resolved.url, api_key=self._resolved.api_key)

    @property
    def pid(self) -> int:
        """The executor's process id (also its process group id)."""
        return self._process.pid

    @property
    def plan(self) -> LaunchPlan:
        """The plan this instance runs (immutable)."""
        return self._plan

    @property
    def exit_reason(self) -> ExitReason | None:
        """How the process ended; None while it runs."""
        return self._exit

    @property
    def log_tail(self) -> tuple[str, ...]:
        """The last lines the executor wrote (secrets redacted)."""
        return self._pump.tail

    @property
    def dropped_log_lines(self) -> int:
        """Lines not forwarded to `logs` because the consumer fell behind."""
        return self._pump.dropped

    def has_exited(self) -> bool:
        """Whether the process has ended (and its group is gone)."""
        return self._exit is not None

    async def output_ended(self) -> None:
        """Return once the executor's output has been read to its end."""
        await self._pump.ended.wait()

    async def wait(self) -> None:
        """Return when the process has exited."""
        await self._exited.wait()

    def send_signal(self, name: str) -> None:
        """Send signal `name` (``SIGTERM``) to the process group; a second SIGTERM is not
        sent (llama-server takes it as "exit 1 now")."""
        if self._exit is None and policy.should_send(name, self._sent):
            self._sent |= {name}
            signal_group(self._process.pid, name)

    async def stop(self, timeout: float = STOP_TIMEOUT, *, drain: float = 0.0) -> ExitReason:
        """One SIGTERM to the process group, SIGKILL if it is still running after `timeout`
        seconds. Idempotent, safe after the process died, and it completes even while the
        caller's scope is being cancelled. With `drain`, first wait up to that many seconds
        until the executor works on no request (llama-server's ``/slots``), so a busy
        executor is stopped without cutting answers off."""
        with trio.CancelScope(shield=True):
            if drain > 0 and not self._exited.is_set():
                with trio.move_on_after(drain):
                    await self._idle()
            settle = policy.settle_left(self.ready_at, trio.current_time())
            if not self._exited.is_set() and settle > 0:
                with trio.move_on_after(settle):
                    await self._exited.wait()
            if not self._exited.is_set():
                self._stop_requested = True
                steps = policy.stop_steps(timeout, sent=self._sent)
                await run_steps(steps, self.send_signal, self._exited.wait)
        assert self._exit is not None
        return self._exit

    async def _idle(self) -> None:
        profile = executor_profile(self._plan.spec.kind)
        if not profile.slots_path:
            return
        path = prefix_of(self._plan.ready, profile.ready_path) + profile.slots_path
        host, port = connect_host(self._resolved.host), self._resolved.port
        while not self._exited.is_set():
            slots = await get_json(host, port, path, self._resolved.api_key, 1.0)
            if slots is None or not slots_busy(slots, profile.slot_busy_field):
                return  # idle, or no way to tell: stop now rather than wait blind
            await trio.sleep(_DRAIN_POLL)

    async def kill(self) -> ExitReason:
        """SIGKILL to the process group now, and wait for its end (a launch that failed or
        was cancelled: no grace, the executor never served anyone)."""
        self._stop_requested = True
        with trio.CancelScope(shield=True):
            await run_steps(policy.stop_steps(0), self.send_signal, self._exited.wait)
        assert self._exit is not None
        return self._exit

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
                await self._reap_group()
            code = self._process.returncode
            assert code is not None
            self._exit = ExitReason(returncode=code, requested=self._stop_requested)
            self._exited.set()
            self._on_exit()

    async def _deliver_then_kill(self) -> None:
        await self._deliver_cancel(self)
        self.send_signal(policy.KILL)

    async def _reap_group(self) -> None:
        """Wait until no process of the executor's group is left (a forked helper can outlive
        the leader by a millisecond or for ever), by the same policy as the leader."""
        pgid = self._process.pid
        if group_alive(pgid):
            steps = policy.stop_steps(
                self.stop_timeout, sent=self._sent, kill_wait=policy.GROUP_KILL_WAIT
            )
            # The leader is gone, so the group is signalled directly (send_signal only signals
            # a running instance).
            await run_steps(steps, lambda name: signal_group(pgid, name), lambda: group_gone(pgid))

    def __repr__(self) -> str:
        state = "running" if self._exit is None else self._exit.describe()
        return f"<Instance pid={self.pid} {self.endpoint.url} {state}>"
