"""What every adapter's `Instance` shows and decides the same way: its endpoint, its plan,
its exit, the last log lines, and which signals may still go to its process group. An
adapter adds only the waiting (`wait`, `stop`) in its own concurrency."""

from __future__ import annotations

from typing import Protocol

from exedra_engine._core import stop as policy
from exedra_engine._core.endpoint import Resolved
from exedra_engine._core.values import Endpoint, LaunchPlan
from exedra_engine._shell.child import ExitReason, signal_group
from exedra_engine.constants import STOP_TIMEOUT


class Lines(Protocol):
    """An adapter's log pump, as an instance reports it."""

    @property
    def tail(self) -> tuple[str, ...]:
        """The last lines, redacted."""
        ...

    @property
    def dropped(self) -> int:
        """Lines not forwarded because the consumer fell behind."""
        ...


class InstanceState:
    """One executor process, whatever runs it. Adapters subclass it."""

    def __init__(
        self,
        plan: LaunchPlan,
        resolved: Resolved,
        pid: int,
        lines: Lines,
        *,
        stop_timeout: float = STOP_TIMEOUT,
    ) -> None:
        self._plan = plan
        self._resolved = resolved
        self._pid = pid
        self._lines = lines
        self._sent: frozenset[str] = frozenset()
        self._stop_requested = False
        self._exit: ExitReason | None = None
        self.ready_at: float | None = None
        """When the ready path first answered 200, on the adapter's clock."""
        self.ready_connections = 0
        """TCP connections the readiness poll opened (one, unless the executor closed it)."""
        self.stop_timeout = stop_timeout
        """The grace period used when the owner goes away under a running child."""

    @property
    def endpoint(self) -> Endpoint:
        """The instance's address and API key."""
        return Endpoint(url=self._resolved.url, api_key=self._resolved.api_key)

    @property
    def pid(self) -> int:
        """The executor's process id (also its process group id)."""
        return self._pid

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
        return self._lines.tail

    @property
    def dropped_log_lines(self) -> int:
        """Lines not forwarded to `logs` because the consumer fell behind."""
        return self._lines.dropped

    def has_exited(self) -> bool:
        """Whether the process has ended (and its group is gone)."""
        return self._exit is not None

    def send_signal(self, name: str) -> None:
        """Send signal `name` (``SIGTERM``) to the process group; a second SIGTERM is not
        sent (llama-server takes it as "exit 1 now")."""
        if self._exit is None and policy.should_send(name, self._sent):
            self._sent |= {name}
            signal_group(self._pid, name)

    def _ended(self, returncode: int) -> ExitReason:
        """Record the exit (the group is gone by now)."""
        self._exit = ExitReason(returncode=returncode, requested=self._stop_requested)
        return self._exit

    def __repr__(self) -> str:
        state = "running" if self._exit is None else self._exit.describe()
        return f"<Instance pid={self.pid} {self.endpoint.url} {state}>"
