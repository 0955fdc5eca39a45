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
from typing import TypedDict, Unpack

from msgspec.structs import replace

from exedra_engine._core.config.check import check_plan_layers
from exedra_engine._core.config.findings import Finding
from exedra_engine._core.config.parse import LocatedConfig
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.gguf.inventory import ModelInventory
from exedra_engine._core.memory.decide import MemoryDecision, decide_memory
from exedra_engine._core.memory.extra_buffers import WeightBuffers, with_extra_buffers
from exedra_engine._core.memory.settings import settings_of
from exedra_engine._core.outcome import boundary
from exedra_engine._core.plan.endpoint import resolve_merged
from exedra_engine._core.plan.engine_args import (
    Pooled,
    cors_findings,
    local_cors,
    plan_layers,
    pooled_findings,
    pooled_serving,
    with_memory_args,
)
from exedra_engine._core.plan.explained import Explained
from exedra_engine._core.plan.launch_plan import LaunchPlan, edited, merge_reading, remember
from exedra_engine._core.plan.layer_checks import Layer
from exedra_engine._core.plan.layers import Merged, env_items, merge
from exedra_engine._core.plan.model_findings import model_findings
from exedra_engine._core.plan.ports import choose_port, port_origin
from exedra_engine._core.plan.request_checks import check_request
from exedra_engine._core.struct import Value
from exedra_engine._core.values import Constraints, ExecutorInfo, Hardware, ModelInfo, ModelSpec
from exedra_engine.constants import INSTALL_HINT
from exedra_engine.errors import (
    ExecutorNotFound,
    NoHardware,
    PortInUse,
)


class PlanOptions(TypedDict, total=False):
    """The keywords of `make_plan` (and `explain_plan`) besides the spec, the host and the
    constraints: the facts a shell gathered; every one may be left out (a dry run)."""

    model: ModelInfo | None
    """The model's header (None, the default, when the file is absent, e.g. a dry run in CI:
    then nothing that needs the header is checked)."""
    ports_in_use: Set[int]
    """Ports the scan skips and an explicit port must not be in."""
    inventory: ModelInventory | None
    """The model's tensor inventory: with it the plan carries its `memory`, and a plan that
    cannot fit is refused (`DoesNotFit`)."""
    side_models: tuple[ModelInventory, ...]
    """The inventories of the projector and draft model the argv names."""
    executors: Executors
    """The executors the spec's kind is looked up in (default: `BUILTIN`)."""
    weight_buffers: WeightBuffers | None
    """Where the binary at hand put the weights in a real load with this placement
    (`exedra_engine._shell.extra_buffers`): its extra host copies are counted."""


class ExplainOptions(PlanOptions, total=False):
    """The keywords of `explain_plan`: `make_plan`'s (`PlanOptions`), and what the layers are
    judged by."""

    flags: FlagTable | None
    """The table the layers are judged by (an installed binary's own, from its help;
    default: the profile's bundled table). It judges, and changes the plan in one way only: a
    flag the engine would add that it lacks is left out (the restriction of web origins of a
    plan with no API key, `local_cors`), and a note says so."""
    config_files: Sequence[LocatedConfig]
    """The override files `constraints.overrides` was merged from, with their lines, so
    findings name file and line; without them the merged overrides are judged as one unnamed
    file."""


def make_plan(
    spec: ModelSpec,
    hw: Hardware | None,
    constraints: Constraints = Constraints(),
    **options: Unpack[PlanOptions],
) -> LaunchPlan:
    """Plan a launch from facts alone (`PlanOptions`: the model's header and inventory, the
    ports in use, the executors). Deterministic: equal inputs give equal plans."""
    executors = options.get("executors", BUILTIN)
    facts = _facts(options)
    profile = executors.profile(spec.kind)  # looked up once for the whole plan
    st = staged(spec, hw, constraints, facts, executors=executors, profile=profile)
    return finished(st, facts, explain=False, executors=executors).plan


plan_launch = boundary(make_plan)
"""`make_plan` as a Result: ``Success(LaunchPlan)``, or ``Failure`` with its `EngineError`."""


def explain_plan(
    spec: ModelSpec,
    hw: Hardware | None,
    constraints: Constraints = Constraints(),
    **options: Unpack[ExplainOptions],
) -> Explained:
    """`make_plan`, plus which layer set each argv option and env variable, and the
    findings of its layers (judged by `ExplainOptions.flags`, named by
    `ExplainOptions.config_files`)."""
    executors = options.get("executors", BUILTIN)
    facts = _facts(options)
    profile = executors.profile(spec.kind)
    st = staged(spec, hw, constraints, facts, executors=executors, profile=profile)
    judge = (options.get("flags"), tuple(options.get("config_files", ())))
    return finished(st, facts, explain=True, judge=judge, executors=executors)


def _facts(options: PlanOptions) -> PlanFacts:
    return PlanFacts(
        model=options.get("model"),
        ports_in_use=options.get("ports_in_use", frozenset()),
        inventory=options.get("inventory"),
        sides=options.get("side_models", ()),
        weight_buffers=options.get("weight_buffers"),
    )


explain_launch = boundary(explain_plan)
"""`explain_plan` as a Result: ``Success(Explained)``, or ``Failure`` with its `EngineError`."""


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
    weight_buffers: WeightBuffers | None = None
    """Where the binary at hand put the model's weights in a real load with this plan's
    placement (its extra host copies: AMX, CPU_REPACK), measured by the shell."""


# Inside the planner, failures are raised and turned into values once, at the public boundary
# (`boundary`): a Result costs ~0.4 us to build and ~0.13 us to test, a dozen per plan.


class Staged(Value, frozen=True, kw_only=True):
    """A plan up to its one merge: what its memory is decided on (`decided`) and what
    `finished` makes the plan from, within any budget. (A struct, not a NamedTuple: built
    once per plan from eleven keywords, which a NamedTuple binds at twice the cost.)"""

    spec: ModelSpec
    hw: Hardware
    constraints: Constraints
    profile: ExecutorProfile
    exe: ExecutorInfo
    layers: tuple[Layer, ...]
    m: Merged
    engine_port: int
    engine_extra: int
    """How many flags the engine layer ends with that the caller added (`PlanFacts`)."""
    pooled: Pooled | None = None
    """How a pooled capability (embeddings, rerank) is served (`pooled_serving`)."""
    model_ctx: int = 0
    """The model's trained context (0: unknown)."""


def staged(
    spec: ModelSpec,
    hw: Hardware | None,
    constraints: Constraints,
    facts: PlanFacts,
    *,
    executors: Executors,
    profile: ExecutorProfile,
) -> Staged:
    """The checks of a request, its layers and their one merge (raising what `plan_launch`
    refuses up to there)."""
    if hw is None:
        raise NoHardware("hardware snapshot is None: call probe() first")
    exe = _installed(profile, hw, spec)
    check_request(profile, spec, constraints, facts.model)
    engine_port = choose_port(constraints, facts.ports_in_use)
    # The executor's own devices where it listed them (a Vulkan device with no DRM node
    # offloads; a card it cannot drive does not), else the kernel's GPUs and its backends.
    cpu_only = constraints.no_gpu or not hw.offload_devices(spec.kind)
    inv, model = facts.inventory, facts.model
    model_ctx = inv.context if inv is not None else model.context if model is not None else 0
    pooled = pooled_serving(
        profile,
        spec,
        constraints,
        model_ctx,
        inv.pooling if inv is not None else -1,
        architecture=inv.architecture if inv else model.architecture if model else "",
        vocab=inv.vocab if inv is not None else 0,
    )
    layers = plan_layers(
        profile,
        spec,
        constraints,
        engine_port,
        cpu_only,
        extra=facts.engine_extra,
        pooled=pooled,
    )
    # One merge: the memory plan reads it, and what it adds (settings no layer set) joins it.
    m = merge(profile, layers, required_key=constraints.api_key, executors=executors)
    return Staged(
        spec=spec,
        hw=hw,
        constraints=constraints,
        profile=profile,
        exe=exe,
        layers=tuple(layers),
        m=m,
        engine_port=engine_port,
        engine_extra=len(facts.engine_extra),
        pooled=pooled,
        model_ctx=model_ctx,
    )


def decided(st: Staged, facts: PlanFacts) -> MemoryDecision | None:
    """The memory of a staged plan within `facts.budget`: nothing is merged again. The
    build's measured copies of the weights (`facts.weight_buffers`) are on top of it."""
    d = _memory(st.profile, st.hw, st.m, facts)
    if d is None or facts.weight_buffers is None:
        return d
    memory, note = with_extra_buffers(d.memory, facts.weight_buffers)
    return replace(d, memory=memory, notes=(*d.notes, note))


def finished(
    st: Staged,
    facts: PlanFacts,
    *,
    explain: bool,
    judge: tuple[FlagTable | None, tuple[LocatedConfig, ...]] | None = None,
    executors: Executors,
) -> Explained:
    """The plan of a staged request within `facts.budget`: its memory decided on the
    merge, the flags that adds joined to it, the reading, the port checked."""
    spec, constraints, profile, m = st.spec, st.constraints, st.profile, st.m
    model, ports_in_use = facts.model, facts.ports_in_use
    # The build's copies of the weights are counted at the end (`weighed`): they are on top
    # of the fit decision, and change nothing but the memory figures.
    memory = _memory(st.profile, st.hw, st.m, facts)
    # Judged by the installed binary's table where it was read: a flag it lacks is not added.
    table = (judge[0] if judge is not None else None) or profile.flags
    joined = (*(memory.engine_args if memory is not None else ()), *local_cors(profile, m, table))
    if joined:
        m = with_memory_args(m, profile, st.layers, joined, after=st.engine_extra)
    reading = merge_reading(
        profile, m, resolve_merged(profile, m.args, m.settings, m.env_map), model
    )
    r = reading.endpoint
    scanned = constraints.port == 0 and r.port == st.engine_port
    if not scanned and r.port in ports_in_use:
        raise PortInUse(f"port {r.port} is already in use ({port_origin(profile, m)})")
    remember(profile, reading)  # the plan's views are read from it
    plan = LaunchPlan(
        spec=spec,
        model=model,
        command=st.exe.path,
        args=m.args,
        env=m.env,
        host=r.host,
        port=r.port,
        api_key=r.api_key,
        key_env=constraints.api_key_env if r.api_key else "",
        ready=reading.ready,
        files=reading.files,
        memory=memory.memory if memory is not None else None,
        port_scanned=scanned,
    )
    found = (
        _findings(profile, spec, constraints, *judge, executors=executors)
        + model_findings(profile, spec, m, model, facts.inventory)
        + tuple(cors_findings(profile, m, judge[0]))
        + tuple(pooled_findings(profile, st.pooled, m, st.model_ctx))
        if judge is not None
        else ()
    )
    notes = (*(memory.notes if memory is not None else ()), *_pooled_note(st.pooled))
    e = _explained(plan, m, found, notes, explain)
    return e if facts.weight_buffers is None else weighed(e, facts.weight_buffers)


def weighed(e: Explained, found: WeightBuffers) -> Explained:
    """`e` with the copies of the weights its build makes (`found`, measured by a shell)
    counted in its memory, and a note saying so: what planning with
    `PlanOptions.weight_buffers` gives, without planning again (the copies are on top of
    the fit decision, and change no flag)."""
    if e.plan.memory is None:
        return e
    memory, note = with_extra_buffers(e.plan.memory, found)
    return replace(e, plan=edited(e.plan, memory=memory), memory=(*e.memory, note))


def _pooled_note(pooled: Pooled | None) -> tuple[str, ...]:
    return (pooled.note,) if pooled is not None else ()


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
    s = settings_of(profile, m.items, m.env)
    by_path = {side.paths[0]: side for side in facts.sides}
    return decide_memory(
        inv,
        m.items,
        m.env,
        hw,
        profile,
        settings=s,
        mmproj=by_path.get(s.mmproj) if s.mmproj else None,
        draft=by_path.get(s.draft) if s.draft else None,
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
