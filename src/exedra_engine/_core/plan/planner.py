"""The pure planner: every fact is an argument, nothing is read, written or timed.

`plan_launch` turns a model, a host snapshot, the caller's constraints and two gathered facts
(the model's header, the ports in use) into a `LaunchPlan`. The layers, lowest first:

    args: spec.run_args < engine flags < overrides.engines[kind].args
          < overrides.models[spec.id].args < constraints.extra_args
    env:  engine env (the API key) < overrides.env < overrides.engines[kind].env
          < overrides.models[spec.id].env < constraints.extra_env

Engine flags are derived in `exedra_engine._core.plan.engine_args` and nowhere else. After
merging, the endpoint is read back from the merged argv and env exactly as the executor reads
them.

`explain_launch` also judges the layers by a flag table it is given (`exedra_engine._core.config.
check`): what they pass to the executor that it would refuse, ignore or misread. Findings are
warnings; they never change the plan.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import TYPE_CHECKING, Any

from exedra_engine._core.config.check import check_plan_layers
from exedra_engine._core.config.findings import Finding
from exedra_engine._core.config.parse import LocatedConfig
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.gguf.inventory import ModelInventory
from exedra_engine._core.memory.decide import MemoryDecision, decide_memory
from exedra_engine._core.memory.settings import read_settings
from exedra_engine._core.outcome import as_result
from exedra_engine._core.plan.endpoint import resolve_merged
from exedra_engine._core.plan.engine_args import (
    cors_findings,
    local_cors,
    plan_layers,
    with_memory_args,
)
from exedra_engine._core.plan.layers import (
    Merged,
    Provenance,
    Source,
    env_items,
    merge,
)
from exedra_engine._core.plan.load_files import load_files
from exedra_engine._core.plan.model_findings import model_findings
from exedra_engine._core.plan.ports import choose_port, port_origin
from exedra_engine._core.plan.request_checks import check_request
from exedra_engine._core.secrets.reprs import shown_explained
from exedra_engine._core.struct import Value
from exedra_engine._core.values import (
    Constraints,
    ExecutorInfo,
    Hardware,
    LaunchPlan,
    ModelInfo,
    ModelSpec,
)
from exedra_engine.constants import INSTALL_HINT
from exedra_engine.errors import (
    EngineError,
    ExecutorNotFound,
    NoHardware,
    PortInUse,
)

if TYPE_CHECKING:
    from returns.result import Result


class Explained(Value, frozen=True, kw_only=True):
    """A plan, the provenance of each of its argv options and env variables, and what its
    layers pass to the executor that it would refuse, ignore or misread."""

    plan: LaunchPlan
    sources: tuple[Source, ...]
    """`provenance` as ``plan --explain`` shows it."""
    findings: tuple[Finding, ...] = ()
    """Warnings about the layers (`exedra_engine._core.config.check`), judged by the flag
    table given to `explain_launch`: the plan is made as it would be without them."""
    memory: tuple[str, ...] = ()
    """The memory arithmetic and what the planner decided from it (``plan --explain``)."""
    provenance: tuple[Provenance, ...] = ()
    """Which layer set each argv item and env variable, and what it replaced, as data."""

    def shown_fields(self) -> dict[str, Any]:
        return shown_explained(self)

    def __repr__(self) -> str:
        return self.shown_repr()


def plan_launch(
    spec: ModelSpec,
    hw: Hardware | None,
    constraints: Constraints = Constraints(),
    *,
    model: ModelInfo | None = None,
    ports_in_use: Set[int] = frozenset(),
    inventory: ModelInventory | None = None,
    side_models: tuple[ModelInventory, ...] = (),
    executors: Executors = BUILTIN,
) -> Result[LaunchPlan, EngineError]:
    """Plan a launch from facts alone. Deterministic: equal inputs give equal plans.

    `model` is the model's header (None when the file is absent, e.g. a dry run in CI: then
    nothing that needs the header is checked). `ports_in_use` are ports the scan skips and
    an explicit port must not be in. `inventory` is the model's tensor inventory: with it
    the plan carries its `memory`, and a plan that cannot fit is refused (`DoesNotFit`);
    `side_models` are the inventories of the projector and draft model the argv names.
    `executors` are the executors the spec's kind is looked up in.
    """
    facts = PlanFacts(
        model=model, ports_in_use=ports_in_use, inventory=inventory, sides=side_models
    )
    return as_result(_plan_only, spec, hw, constraints, facts, executors)


def _plan_only(
    spec: ModelSpec, hw: Hardware | None, c: Constraints, facts: PlanFacts, executors: Executors
) -> LaunchPlan:
    # One Result, not a second one from `.map` (each costs ~0.4 us).
    profile = executors.profile(spec.kind)
    return _plan(spec, hw, c, facts, explain=False, executors=executors, profile=profile).plan


def explain_launch(
    spec: ModelSpec,
    hw: Hardware | None,
    constraints: Constraints = Constraints(),
    *,
    model: ModelInfo | None = None,
    ports_in_use: Set[int] = frozenset(),
    flags: FlagTable | None = None,
    config_files: Sequence[LocatedConfig] = (),
    inventory: ModelInventory | None = None,
    side_models: tuple[ModelInventory, ...] = (),
    executors: Executors = BUILTIN,
) -> Result[Explained, EngineError]:
    """`plan_launch`, plus which layer set each argv option and env variable, and the
    findings of its layers.

    `flags` is the table the layers are judged by (an installed binary's own, from its
    help; default: the profile's bundled table); it judges, and changes the plan in one
    way only: a flag the engine would add that it lacks is left out (the restriction of web
    origins of a plan with no API key, `local_cors`), and a note says so.
    `config_files` are the override files `constraints.overrides` was merged from, with
    their lines, so findings name file and line; without them the merged overrides are
    judged as one unnamed file.
    """
    return as_result(
        explain_plan,
        spec,
        hw,
        constraints,
        model=model,
        ports_in_use=ports_in_use,
        flags=flags,
        config_files=config_files,
        inventory=inventory,
        side_models=side_models,
        executors=executors,
    )


def explain_plan(
    spec: ModelSpec,
    hw: Hardware | None,
    constraints: Constraints = Constraints(),
    *,
    model: ModelInfo | None = None,
    ports_in_use: Set[int] = frozenset(),
    flags: FlagTable | None = None,
    config_files: Sequence[LocatedConfig] = (),
    inventory: ModelInventory | None = None,
    side_models: tuple[ModelInventory, ...] = (),
    executors: Executors = BUILTIN,
    profile: ExecutorProfile | None = None,
) -> Explained:
    """`explain_launch` for the library's own callers (the shells): raises the
    `EngineError` instead of returning it. `profile` is the spec's kind's in `executors`,
    where the caller has looked it up already."""
    judge = (flags, tuple(config_files))
    facts = PlanFacts(
        model=model, ports_in_use=ports_in_use, inventory=inventory, sides=side_models
    )
    return _plan(
        spec,
        hw,
        constraints,
        facts,
        explain=True,
        judge=judge,
        executors=executors,
        profile=profile or executors.profile(spec.kind),
    )


class PlanFacts(Value, frozen=True, kw_only=True):
    """What the shell gathered for a plan, and what a group plan decided for a member."""

    model: ModelInfo | None
    ports_in_use: Set[int]
    inventory: ModelInventory | None = None
    sides: tuple[ModelInventory, ...] = ()
    budget: tuple[int, str] | None = None
    """The host memory the plan may fill and how it was found (default: `usable_host`)."""
    engine_extra: tuple[str, ...] = ()
    """Flags added at the end of the engine layer (a group member's threads and CPU set)."""


def plan_facts(
    spec: ModelSpec,
    hw: Hardware | None,
    constraints: Constraints,
    facts: PlanFacts,
    *,
    explain: bool = False,
    flags: FlagTable | None = None,
    config_files: Sequence[LocatedConfig] = (),
    executors: Executors = BUILTIN,
) -> Explained:
    """The raising planner from gathered facts (the group planner's entry): `Explained`
    with provenance and findings (judged as `explain_launch` does) only when `explain`."""
    judge = (flags, tuple(config_files)) if explain else None
    profile = executors.profile(spec.kind)
    return _plan(
        spec,
        hw,
        constraints,
        facts,
        explain=explain,
        judge=judge,
        executors=executors,
        profile=profile,
    )


# Inside the planner, failures are raised and turned into values once, at the public boundary
# (`as_result`): a Result costs ~0.4 us to build and ~0.13 us to test, a dozen per plan.
def _plan(
    spec: ModelSpec,
    hw: Hardware | None,
    constraints: Constraints,
    facts: PlanFacts,
    *,
    explain: bool,
    judge: tuple[FlagTable | None, tuple[LocatedConfig, ...]] | None = None,
    executors: Executors,
    profile: ExecutorProfile,
) -> Explained:
    # `profile` is the spec's kind's, looked up once for the whole plan.
    model, ports_in_use = facts.model, facts.ports_in_use
    if hw is None:
        raise NoHardware("hardware snapshot is None: call probe() first")
    exe = _installed(profile, hw, spec)
    check_request(profile, spec, constraints, model)
    engine_port = choose_port(constraints, ports_in_use)
    cpu_only = constraints.no_gpu or not hw.has_gpu() or not exe.has_gpu_backend()
    layers = plan_layers(
        profile, spec, constraints, engine_port, cpu_only, extra=facts.engine_extra
    )
    # One merge: the memory plan reads it, and what it adds (settings no layer set) joins it.
    m = merge(profile, layers, required_key=constraints.api_key, executors=executors)
    memory = _memory(profile, hw, m, facts)
    # Judged by the installed binary's table where it was read: a flag it lacks is not added.
    table = (judge[0] if judge is not None else None) or profile.flags
    joined = (*(memory.engine_args if memory is not None else ()), *local_cors(profile, m, table))
    if joined:
        m = with_memory_args(m, profile, layers, joined, after=len(facts.engine_extra))
    r = resolve_merged(profile, m.args, m.settings, m.env_map)
    scanned = constraints.port == 0 and r.port == engine_port
    if not scanned and r.port in ports_in_use:
        raise PortInUse(f"port {r.port} is already in use ({port_origin(profile, m)})")
    plan = LaunchPlan(
        spec=spec,
        model=model,
        command=exe.path,
        args=m.args,
        env=m.env,
        host=r.host,
        port=r.port,
        api_key=r.api_key,
        key_env=constraints.api_key_env if r.api_key else "",
        ready=ready_path(profile, m),
        files=load_files(profile, m.args, m.env_map, model, items=m.items),
        memory=memory.memory if memory is not None else None,
        port_scanned=scanned,
    )
    found = (
        _findings(profile, spec, constraints, *judge, executors=executors)
        + model_findings(profile, spec, m, model, facts.inventory)
        + tuple(cors_findings(profile, m, judge[0]))
        if judge is not None
        else ()
    )
    return _explained(plan, m, found, memory.notes if memory is not None else (), explain)


def _installed(profile: ExecutorProfile, hw: Hardware, spec: ModelSpec) -> ExecutorInfo:
    exe = hw.executor(spec.kind)
    if exe is None:
        raise ExecutorNotFound(
            f"{profile.binary} (kind {spec.kind}) is not installed: not on PATH nor in "
            f"the executor cache; {INSTALL_HINT}, or name the binary (--executor PATH)"
        )
    return exe


def _explained(
    plan: LaunchPlan,
    m: Merged,
    found: tuple[Finding, ...],
    notes: tuple[str, ...],
    explain: bool,
) -> Explained:
    if not explain:  # provenance is data in `m`; its text is made only for --explain
        return Explained(plan=plan, sources=(), findings=found, memory=notes)
    prov = m.provenance
    sources = tuple(o.source() for o in prov)
    return Explained(plan=plan, sources=sources, findings=found, memory=notes, provenance=prov)


def _memory(
    profile: ExecutorProfile, hw: Hardware, m: Merged, facts: PlanFacts
) -> MemoryDecision | None:
    """The plan's memory, when the profile says how to read it and the header was read."""
    inv = facts.inventory
    if inv is None or not profile.memory_flags:
        return None
    s = read_settings(profile, m.args, m.env, items=m.items)
    by_path = {side.paths[0]: side for side in facts.sides}
    return decide_memory(
        inv,
        m.args,
        m.env,
        hw,
        profile,
        mmproj=by_path.get(s.mmproj) if s.mmproj else None,
        draft=by_path.get(s.draft) if s.draft else None,
        items=m.items,
        settings=s,
        budget=facts.budget,
    )


def _findings(
    profile: ExecutorProfile,
    spec: ModelSpec,
    c: Constraints,
    flags: FlagTable | None,
    files: tuple[LocatedConfig, ...],
    *,
    executors: Executors,
) -> tuple[Finding, ...]:
    if not files and c.overrides is not None:
        files = (LocatedConfig(source="", config=c.overrides),)
    return check_plan_layers(
        profile,
        flags or profile.flags,
        files=files,
        model_id=spec.id,
        run_args=spec.run_args,
        caller_args=c.extra_args,
        caller_env=env_items(c.extra_env, "caller env"),
        executors=executors,
    )


def ready_path(profile: ExecutorProfile, merged: Merged) -> str:
    """The readiness path, under the prefix the merged argv or env sets (llama-server's
    ``--api-prefix``, whisper-server's ``--request-path``)."""
    p = profile
    flag = merged.settings.get(p.ready_prefix_flag) if p.ready_prefix_flag else None
    if flag:
        prefix = flag[0]
    elif p.ready_prefix_env:
        # The merge keeps one form of a setting: the variable only when no flag won.
        prefix = merged.env_map.get(p.ready_prefix_env, "")
    else:
        prefix = ""
    return prefix.rstrip("/") + p.ready_path
