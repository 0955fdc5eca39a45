"""What one launch is given besides the plan, in one frozen value (`LaunchOptions`), and
the keywords every adapter's entry points take to make it (`Options`).

The load-progress stream is one of them (`on_progress`, a callback the readiness wait feeds
with `LoadProgress` samples), so every adapter has it at once."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Generic, TypedDict, TypeVar, Unpack

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.launch.budget import load_limits
from exedra_engine._core.launch.child import ChildSpec
from exedra_engine._core.launch.progress import LoadProgress
from exedra_engine._core.launch.readiness import LoadLimits
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.plan.provenance import Source
from exedra_engine._shell.launch import tree
from exedra_engine._shell.local.host import LocalHost
from exedra_engine._shell.local.ports import ProcessSockets
from exedra_engine._shell.plan import read_ports_in_use
from exedra_engine.constants import STOP_TIMEOUT

L = TypeVar("L")

PortsReader = Callable[[str], frozenset[int]]
"""Which ports an executor of a kind could not bind now (`exedra_engine._shell.plan`)."""

ProgressCallback = Callable[[LoadProgress], object]
"""What `LaunchOptions.on_progress` is called with: one sample of the load."""

Spawn = Callable[[ChildSpec], tree.Started]
"""Starts a `ChildSpec` as the root of a process tree (`tree.start`; blocking)."""


def local_ports(kind: str, *, executors: Executors = BUILTIN) -> frozenset[int]:
    """The ports an executor of `kind` could not bind on this host now."""
    return read_ports_in_use(LocalHost(), kind, executors=executors)


class Options(TypedDict, total=False):
    """The keywords `launch`, `open_instance` and `run` take (`LaunchOptions`' fields)."""

    ready_timeout: float | None
    stall_timeout: float | None
    stop_timeout: float
    ports: PortsReader | None
    sockets: ProcessSockets | None
    sources: Sequence[Source]
    executors: Executors
    on_progress: ProgressCallback | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class LaunchOptions(Generic[L]):
    """One launch's options, kept together through the port retries. `logs` is the
    adapter's kind of sink."""

    logs: L | None = None
    """Where the executor's lines go (None: nowhere)."""
    ready_timeout: float | None = None
    """The whole load's bound (None: the load budget of the plan's files)."""
    stall_timeout: float | None = None
    """The longest silence of a load (None: `budget.STALL`)."""
    stop_timeout: float = STOP_TIMEOUT
    """The grace of a stop that the owner's going away starts."""
    ports: PortsReader | None = None
    """Which ports are taken, when a scanned port was lost (None: this host's)."""
    sockets: ProcessSockets | None = None
    """Which process listens on a port (None: this host's kernel)."""
    sources: Sequence[Source] = ()
    """The plan's provenance (`explain_launch`): which layer set a refused flag (kept as a
    tuple)."""
    executors: Executors = BUILTIN
    """The executors the plan's kind is looked up in."""
    on_progress: ProgressCallback | None = None
    """Called at each poll of the readiness wait with the load's progress: the bytes of the
    plan's files the executor has mapped or read, of their total (`LoadProgress`; measured
    from /proc, `exedra_engine._shell.launch.load_progress`). It runs in the event loop: keep it
    quick. None: not measured."""
    spawn: Spawn = tree.start
    """The process port: how a child is started, and its tree followed (tests fake it)."""

    def __post_init__(self) -> None:
        # A caller's list is copied, so the options cannot change under a launch.
        object.__setattr__(self, "sources", tuple(self.sources))

    @classmethod
    def of(cls, logs: L | None = None, **options: Unpack[Options]) -> LaunchOptions[L]:
        """From an entry point's keywords (`Options`)."""
        return cls(logs=logs, **options)

    def limits(self, plan: LaunchPlan) -> LoadLimits:
        """The load's limits for `plan`."""
        return load_limits(plan, self.ready_timeout, self.stall_timeout)

    def ports_in_use(self, kind: str) -> frozenset[int]:
        """The ports an executor of `kind` could not bind now."""
        read = self.ports or functools.partial(local_ports, executors=self.executors)
        return read(kind)

    def process_sockets(self) -> ProcessSockets:
        """Who listens where."""
        return self.sockets or LocalHost()
