"""The pure planner: every fact is an argument, nothing is read, written or timed.

`plan_launch` turns a model, a host snapshot, the caller's constraints and two gathered facts
(the model's header, the ports in use) into a `LaunchPlan`. The layers, lowest first:

    args: spec.run_args < engine flags < overrides.engines[kind].args
          < overrides.models[spec.id].args < constraints.extra_args
    env:  engine env (the API key) < overrides.env < overrides.engines[kind].env
          < overrides.models[spec.id].env < constraints.extra_env

Engine flags are derived here and nowhere else (see `engine_args`). After merging, the
endpoint is read back from the merged argv and env exactly as the executor reads them.

`explain_launch` also judges the layers by a flag table it is given (`exedra_engine._core.
check`): what they pass to the executor that it would refuse, ignore or misread. Findings are
warnings; they never change the plan.
"""

from __future__ import annotations

import re
from collections.abc import Sequence, Set
from typing import TYPE_CHECKING, Any

import msgspec

from exedra_engine._core.config.check import Finding, check_plan_layers, too_many_threads
from exedra_engine._core.config.parse import LocatedConfig
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import BUILTIN, ExecutorProfile, Executors
from exedra_engine._core.gguf.inventory import ModelInventory
from exedra_engine._core.memory.estimate import MemoryDecision, decide_memory, read_settings
from exedra_engine._core.outcome import as_result
from exedra_engine._core.plan.endpoint import resolve, resolve_merged
from exedra_engine._core.plan.layers import (
    Layer,
    Merged,
    Provenance,
    Source,
    env_items,
    merge,
    unfit,
)
from exedra_engine._core.plan.load_files import load_files
from exedra_engine._core.secrets.reprs import shown_explained
from exedra_engine._core.struct import Value, freeze
from exedra_engine._core.values import (
    Constraints,
    ExecutorInfo,
    Hardware,
    LaunchPlan,
    ModelInfo,
    ModelSpec,
)
from exedra_engine.constants import DEFAULT_HOST, DEFAULT_PORT_BASE, INSTALL_HINT, MAX_THREADS
from exedra_engine.errors import (
    EngineError,
    ExecutorNotFound,
    NoHardware,
    PlanError,
    PortInUse,
)

if TYPE_CHECKING:
    from returns.result import Result


RANK_RUN_ARGS = 0
RANK_ENGINE = 1
RANK_CONFIG_ENV = 2
RANK_CONFIG_ENGINE = 3
RANK_CONFIG_MODEL = 4
RANK_CALLER = 5
_NAMES = freeze(
    {
        RANK_RUN_ARGS: "run_args",
        RANK_ENGINE: "engine",
        RANK_CALLER: "caller",
        RANK_CONFIG_ENV: "config env",
    }
)
"""The names of the layers every plan has (`_layers`); the config sections' names say which
section (`_config_names`)."""


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
    facts = _Facts(model=model, ports_in_use=ports_in_use, inventory=inventory, sides=side_models)
    return as_result(_plan_only, spec, hw, constraints, facts, executors)


def _plan_only(
    spec: ModelSpec, hw: Hardware | None, c: Constraints, facts: _Facts, executors: Executors
) -> LaunchPlan:
    # One Result, not a second one from `.map` (each costs ~0.4 us).
    return _plan(spec, hw, c, facts, explain=False, executors=executors).plan


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
    help; default: the profile's bundled table); it judges, it does not change the plan.
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
) -> Explained:
    """`explain_launch` for the library's own callers (the shells): raises the
    `EngineError` instead of returning it."""
    judge = (flags, tuple(config_files))
    facts = _Facts(model=model, ports_in_use=ports_in_use, inventory=inventory, sides=side_models)
    return _plan(spec, hw, constraints, facts, explain=True, judge=judge, executors=executors)


class _Facts(Value, frozen=True, kw_only=True):
    """What the shell gathered for a plan."""

    model: ModelInfo | None
    ports_in_use: Set[int]
    inventory: ModelInventory | None = None
    sides: tuple[ModelInventory, ...] = ()


# Inside the planner, failures are raised and turned into values once, at the public boundary
# (`as_result`): a Result costs ~0.4 us to build and ~0.13 us to test, a dozen per plan.
def _plan(
    spec: ModelSpec,
    hw: Hardware | None,
    constraints: Constraints,
    facts: _Facts,
    *,
    explain: bool,
    judge: tuple[FlagTable | None, tuple[LocatedConfig, ...]] | None = None,
    executors: Executors = BUILTIN,
) -> Explained:
    model, ports_in_use = facts.model, facts.ports_in_use
    if hw is None:
        raise NoHardware("hardware snapshot is None: call probe() first")
    profile = executors.profile(spec.kind)
    exe = _installed(profile, hw, spec)
    _check(profile, spec, constraints, model)
    engine_port = _choose_port(constraints, ports_in_use)
    cpu_only = constraints.no_gpu or not hw.has_gpu() or not exe.has_gpu_backend()
    layers = _layers(profile, spec, constraints, engine_port, cpu_only)
    m = merge(profile, layers, required_key=constraints.api_key, executors=executors)
    memory = _memory(profile, hw, m, facts)
    if memory is not None and memory.engine_args:
        layers = _layers(
            profile, spec, constraints, engine_port, cpu_only, memory_args=memory.engine_args
        )
        m = merge(profile, layers, required_key=constraints.api_key, executors=executors)
    r = resolve_merged(spec.kind, m.args, m.settings, m.env_map, executors=executors)
    scanned = constraints.port == 0 and r.port == engine_port
    if not scanned and r.port in ports_in_use:
        raise PortInUse(f"port {r.port} is already in use ({_port_origin(profile, m)})")
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
    profile: ExecutorProfile, hw: Hardware, m: Merged, facts: _Facts
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
        spec.kind,
        flags or profile.flags,
        files=files,
        model_id=spec.id,
        run_args=spec.run_args,
        caller_args=c.extra_args,
        caller_env=env_items(c.extra_env, "caller env"),
        executors=executors,
    )


def engine_args(
    profile: ExecutorProfile,
    spec: ModelSpec,
    c: Constraints,
    port: int,
    cpu_only: bool,
    *,
    memory_args: tuple[str, ...] = (),
) -> tuple[str, ...]:
    """The flags the engine layer derives from the spec, the host and the constraints."""
    p = profile
    args = [p.model_flag, spec.path]
    if p.alias_flag and spec.id:
        args += [p.alias_flag, spec.id]
    args += [p.host_flag, c.host or DEFAULT_HOST, p.port_flag, str(port)]
    if c.ctx:
        args += [p.ctx_flag, str(c.ctx)]
    if c.threads:
        args += [p.threads_flag, str(c.threads)]
    if not c.ui:
        args += p.ui_off_args
    if cpu_only:
        args += p.cpu_only_args
    for cap in spec.capabilities:
        args += p.capabilities[cap]
    args += memory_args  # what the memory plan decided (a context that fits, --cache-ram)
    return tuple(args)


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


def _check(p: ExecutorProfile, spec: ModelSpec, c: Constraints, model: ModelInfo | None) -> None:
    _check_serves(p, spec, model)
    _check_options(p, c)
    if not spec.path:
        raise PlanError("the model path is empty")
    for what, value in (
        ("host", c.host),
        ("model path", spec.path),
        ("model id", spec.id),
        ("API key", c.api_key),
    ):
        why = unfit(value)
        if why:
            raise PlanError(f"the {what} {why}")
    for what, n in (("ctx", c.ctx), ("threads", c.threads)):
        if not 0 <= n <= _INT32_MAX:
            raise PlanError(f"{what} {n} is outside 0-{_INT32_MAX} (0: the executor's default)")
    if c.threads > MAX_THREADS:
        raise PlanError(too_many_threads(f"threads {c.threads} ({p.threads_flag})", p.binary))


def _check_serves(p: ExecutorProfile, spec: ModelSpec, model: ModelInfo | None) -> None:
    for cap in spec.capabilities:
        if cap not in p.capabilities:
            raise PlanError(
                f"capability {cap!r} cannot be served by {p.binary} "
                f"(kind {spec.kind} serves: {', '.join(p.capabilities)})"
            )
    if model is not None and not p.serves_architecture(model.architecture):
        raise PlanError(
            f"{spec.path}: a {model.architecture} model cannot be served by {p.binary} "
            f"(kind {spec.kind})" + (f"; {p.format_hint}" if p.format_hint else "")
        )


def _check_options(p: ExecutorProfile, c: Constraints) -> None:
    if c.api_key and not p.has_api_key:
        raise PlanError(
            f"{p.binary} has no API key option: an api_key cannot be enforced for kind "
            f"{p.kind}; put an authenticating proxy in front of it instead"
        )
    if c.ctx and not p.ctx_flag:
        raise PlanError(f"{p.binary} has no context-size option (ctx)")
    if _CONTROL.search(c.api_key):
        # Not sendable: an HTTP header cannot carry it, so no client could authenticate.
        raise PlanError(
            "the API key contains a control character (a newline, a tab, ...), which no "
            "client can send in an Authorization header"
        )
    if c.api_key and c.api_key.strip() != c.api_key:
        # Clients and servers strip a header value's outer blanks: it would never match.
        raise PlanError(
            "the API key begins or ends with a blank (or is only blanks), which an "
            "Authorization header loses in transit"
        )
    if p.key_separator in c.api_key:
        raise PlanError(
            f"the API key contains {_CHAR_NAMES.get(p.key_separator, repr(p.key_separator))}, "
            f"which {p.binary} would split into several keys"
        )


_CONTROL = re.compile("[\x00-\x1f\x7f]")
_CHAR_NAMES = freeze({",": "a comma", ";": "a semicolon", " ": "a space"})
_INT32_MAX = 2**31 - 1  # the executors read these with std::stoi


def _choose_port(c: Constraints, in_use: Set[int]) -> int:
    if c.port:
        if not 0 < c.port < 65536:
            raise PlanError(f"port {c.port} is outside 1-65535")
        if c.port in in_use:
            raise PortInUse(f"port {c.port} is already in use (requested explicitly)")
        return c.port
    base = c.port_base or DEFAULT_PORT_BASE
    if not 0 < base < 65536:
        raise PlanError(f"port_base {base} is outside 1-65535")
    p = next_free_port(base, in_use)
    if p is None:
        raise PortInUse(f"no free port from {base} to 65535")
    return p


def next_free_port(base: int, in_use: Set[int]) -> int | None:
    """The first port from `base` up that is not in use, or None."""
    return next((p for p in range(base, 65536) if p not in in_use), None)


def _layers(
    profile: ExecutorProfile,
    spec: ModelSpec,
    c: Constraints,
    port: int,
    cpu_only: bool,
    *,
    memory_args: tuple[str, ...] = (),
) -> list[Layer]:
    o = c.overrides
    extra_env = env_items(c.extra_env, "caller env")
    engine_env = ((profile.key_env, c.api_key),) if c.api_key else ()
    layers = [
        Layer(name=_NAMES[RANK_RUN_ARGS], rank=RANK_RUN_ARGS, args=spec.run_args),
        Layer(
            name=_NAMES[RANK_ENGINE],
            rank=RANK_ENGINE,
            args=engine_args(profile, spec, c, port, cpu_only, memory_args=memory_args),
            env=engine_env,
        ),
        Layer(name=_NAMES[RANK_CALLER], rank=RANK_CALLER, args=c.extra_args, env=extra_env),
    ]
    if o is not None:
        if o.env:
            layers.append(
                Layer(name=_NAMES[RANK_CONFIG_ENV], rank=RANK_CONFIG_ENV, env=tuple(o.env.items()))
            )
        names = _config_names(spec)
        eng = o.engines.get(spec.kind)
        if eng is not None:
            layers.append(
                Layer(
                    name=names[0],
                    rank=RANK_CONFIG_ENGINE,
                    args=eng.args,
                    env=tuple(eng.env.items()),
                )
            )
        mod = o.models.get(spec.id) if spec.id else None
        if mod is not None:
            layers.append(
                Layer(
                    name=names[1],
                    rank=RANK_CONFIG_MODEL,
                    args=mod.args,
                    env=tuple(mod.env.items()),
                )
            )
    return layers


def _config_names(spec: ModelSpec) -> tuple[str, str]:
    """The names of the override layers of `spec`: its kind's section, its model's section."""
    return f"config engines.{spec.kind}", f"config models.{spec.id}"


def _port_origin(p: ExecutorProfile, m: Merged) -> str:
    # The port comes from the winning port flag, else from the port variable (the merge keeps
    # one form of a setting).
    for o in m.provenance:
        if o.key == p.port_flag or (p.port_env and o.key == p.port_env):
            via = f" via {p.port_env}" if o.said.what == "env" else ""
            return f"set by {o.said.layer}{via}"
    return "set by a layer above the engine"


def with_port(plan: LaunchPlan, port: int, *, executors: Executors = BUILTIN) -> LaunchPlan:
    """The same plan on another port: the winning ``--port`` value is rewritten and the
    endpoint read back again. Only for plans whose port the planner chose by scanning;
    raises `PlanError` for any other."""
    if not plan.port_scanned:
        raise PlanError(f"port {plan.port} was requested explicitly; it is never moved")
    profile = executors.profile(plan.spec.kind)
    args = list(plan.args)
    # The executor reads the last port flag; its value stands where the reader says.
    last = next(
        (
            it.value_at[0]
            for it in reversed(profile.flags.read_items(args))
            if it.key == profile.port_flag and it.values and it.problem is None
        ),
        None,
    )
    if last is None:
        raise PlanError("the plan's args have no port flag to move")
    args[last] = str(port)
    r = resolve(plan.spec.kind, args, plan.env, executors=executors)
    return msgspec.structs.replace(
        plan, args=tuple(args), host=r.host, port=r.port, api_key=r.api_key
    )
