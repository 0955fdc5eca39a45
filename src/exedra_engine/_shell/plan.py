"""`plan`: the shell that gathers the planner's facts (the model header, the ports in use)
and calls the pure planner."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from exedra_engine._core.config import LocatedConfig
from exedra_engine._core.executors import executor_profile
from exedra_engine._core.flags import FlagTable
from exedra_engine._core.kinds import Kind
from exedra_engine._core.netstat import holding_states, ports_in_use
from exedra_engine._core.outcome import as_result
from exedra_engine._core.planner import Explained, explain_plan
from exedra_engine._core.struct import Value
from exedra_engine._core.values import Constraints, Hardware, LaunchPlan, ModelInfo, ModelSpec
from exedra_engine._shell.host import LocalHost
from exedra_engine._shell.inspect import read_model
from exedra_engine._shell.ports import HostFiles, HostSockets
from exedra_engine.errors import EngineError, NotGGUF

if TYPE_CHECKING:
    from returns.result import Result


class PlanRequest(Value, frozen=True, kw_only=True):
    """What a plan is made from, named: the model, the host it is for, the caller's
    constraints and the override files those were merged from (so that findings name file
    and line). One value, so that no caller spreads a tuple into the wrong parameters."""

    spec: ModelSpec
    hardware: Hardware | None
    constraints: Constraints = Constraints()
    config_files: tuple[LocatedConfig, ...] = ()
    check_ports: bool = True
    """Without it the plan is made as if every port were free: a dry run for another
    machine, independent of what listens here."""


def plan(
    spec: ModelSpec, hw: Hardware | None, constraints: Constraints = Constraints()
) -> Result[LaunchPlan, EngineError]:
    """Plan a launch: read the model's header and the ports in use, then plan purely.

    A missing model file is not an error here (dry runs in CI plan without the weights):
    the plan's `model` is then None. A file that exists but is not a GGUF model is an
    error for kind llama.
    """
    req = PlanRequest(spec=spec, hardware=hw, constraints=constraints)
    return as_result(explain_request, req).map(lambda e: e.plan)


def plan_explained(
    spec: ModelSpec,
    hw: Hardware | None,
    constraints: Constraints = Constraints(),
    files: HostFiles | None = None,
    *,
    check_ports: bool = True,
    flags: FlagTable | None = None,
    config_files: Sequence[LocatedConfig] = (),
) -> Result[Explained, EngineError]:
    """`plan`, with the provenance of every argv option and env variable and the findings of
    its layers (judged by `flags`, see `explain_launch`).

    Without `check_ports` the plan is made as if every port were free: a dry run for another
    machine, independent of what listens here.
    """
    req = PlanRequest(
        spec=spec,
        hardware=hw,
        constraints=constraints,
        config_files=tuple(config_files),
        check_ports=check_ports,
    )
    return as_result(explain_request, req, files, flags=flags)


def explain_request(
    req: PlanRequest, files: HostFiles | None = None, *, flags: FlagTable | None = None
) -> Explained:
    """`plan_explained` of a request, raising its `EngineError`: for the command line and
    the library's other shells."""
    host = files or LocalHost()
    kind = req.spec.kind
    in_use = read_ports_in_use(host, kind) if req.check_ports else frozenset()
    return explain_plan(
        req.spec,
        req.hardware,
        req.constraints,
        model=model_facts(req.spec, host),
        ports_in_use=in_use,
        flags=flags,
        config_files=req.config_files,
    )


def model_facts(spec: ModelSpec, files: HostFiles) -> ModelInfo | None:
    """The model's header when there is one to read; raises what `read_model` raises."""
    if "\0" in spec.path or not files.exists(spec.path):
        return None  # a NUL in the path is the planner's to refuse, naming it
    try:
        return read_model(spec.path, files)
    except NotGGUF:
        if executor_profile(spec.kind).gguf:
            raise
        return None  # e.g. whisper models: ggml .bin files, whose header is not GGUF


def read_ports_in_use(files: HostFiles, kind: Kind) -> frozenset[int]:
    """Ports the `kind` executor could not bind in this network namespace: from a netlink
    dump where the host offers one (`HostSockets`), else from /proc/net/tcp{,6}."""
    time_wait = executor_profile(kind).time_wait_blocks_bind
    if isinstance(files, HostSockets):
        dumped = files.tcp_ports(holding_states(time_wait=time_wait))
        if dumped is not None:
            return dumped
    return ports_in_use(
        *(files.read_text(p) or "" for p in ("/proc/net/tcp", "/proc/net/tcp6")),
        time_wait=time_wait,
    )
