"""`plan`: the shell that gathers the planner's facts (the model header and tensor inventory,
the ports in use, the sizes of the files it loads) and calls the pure planner."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec
from msgspec import UNSET

from exedra_engine._core.config.parse import LocatedConfig
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.gguf.inventory import ModelInventory
from exedra_engine._core.gguf.inventory_reader import UnsizedTensors
from exedra_engine._core.gguf.quant import quant_name
from exedra_engine._core.host.netstat import holding_states, ports_in_use
from exedra_engine._core.memory.extra_buffers import WeightBuffers
from exedra_engine._core.outcome import as_result
from exedra_engine._core.plan.engine_args import override_sections
from exedra_engine._core.plan.explained import Explained
from exedra_engine._core.plan.launch_plan import LaunchPlan, edited
from exedra_engine._core.plan.load_files import with_sizes
from exedra_engine._core.plan.planner import explain_plan
from exedra_engine._core.struct import Value
from exedra_engine._core.values import Constraints, Hardware, ModelInfo, ModelSpec
from exedra_engine._shell.inspect import inventory_at, read_model
from exedra_engine._shell.local.host import LocalHost
from exedra_engine._shell.local.ports import HostFiles, HostSockets
from exedra_engine.errors import EngineError, ModelUnreadable, NotGGUF

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
    executors: Executors = BUILTIN
    """The executors the spec's kind is looked up in."""
    weight_buffers: WeightBuffers | None = None
    """Where the binary at hand puts the weights with this plan's placement, measured
    (`exedra_engine._shell.extra_buffers`): its extra host copies are counted."""


def plan(
    spec: ModelSpec,
    hw: Hardware | None,
    constraints: Constraints = Constraints(),
    *,
    executors: Executors = BUILTIN,
) -> Result[LaunchPlan, EngineError]:
    """Plan a launch: read the model's header and the ports in use, then plan purely.

    A missing model file is not an error here (dry runs in CI plan without the weights):
    the plan's `model` is then None. A file that exists but is not a GGUF model is an
    error for kind llama.
    """
    req = PlanRequest(spec=spec, hardware=hw, constraints=constraints, executors=executors)
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
    executors: Executors = BUILTIN,
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
        executors=executors,
    )
    return as_result(explain_request, req, files, flags=flags)


def explain_request(
    req: PlanRequest,
    files: HostFiles | None = None,
    *,
    flags: FlagTable | None = None,
    profile: ExecutorProfile | None = None,
) -> Explained:
    """`plan_explained` of a request, raising its `EngineError`: for the command line and
    the library's other shells. `profile` is the request's kind's, where the caller has
    looked it up already."""
    host = files or LocalHost()
    spec = req.spec
    # Looked up once for every fact gathered.
    profile = profile or req.executors.profile(spec.kind)
    in_use = ports_in_use_for(profile, host) if req.check_ports else frozenset()
    model, inventory = model_inventory_for(profile, spec, host)
    e = explain_plan(
        spec,
        req.hardware,
        req.constraints,
        model=model,
        ports_in_use=in_use,
        flags=flags,
        config_files=req.config_files,
        inventory=inventory,
        side_models=side_inventories_for(profile, spec, req.constraints, host),
        executors=req.executors,
        weight_buffers=req.weight_buffers,
    )
    return sized(e, lambda path: file_size(path, host))


def sized(e: Explained, size: Callable[[str], int]) -> Explained:
    """The plan with the size of every file it loads (the planner knows the header's only),
    as `size` tells it (`file_size` on a host)."""
    sizes = {f.path: size(f.path) for f in e.plan.files if not f.size}
    if not any(sizes.values()):
        return e
    plan = edited(e.plan, files=with_sizes(e.plan.files, sizes))
    return msgspec.structs.replace(e, plan=plan)


def file_size(path: str, files: HostFiles) -> int:
    """Bytes of the regular file `path`; 0 when it cannot be told (absent, unreadable)."""
    if "\0" in path or not path.startswith("/") or not files.exists(path):
        return 0  # a dry run for another host opens nothing
    try:
        stream, size = files.open_file(path)
    except OSError:
        return 0
    stream.close()
    return size


def model_inventory(
    spec: ModelSpec, files: HostFiles, *, executors: Executors = BUILTIN
) -> tuple[ModelInfo | None, ModelInventory | None]:
    """The model's header and, for an executor whose memory is estimated, its tensor
    inventory (one read: the header's facts come from it). A header whose inventory cannot
    be read (a ggml type newer than this library) is planned without a memory plan; any
    other fault of a header or of a shard raises its `NotGGUF`."""
    return model_inventory_for(executors.profile(spec.kind), spec, files)


def model_inventory_for(
    profile: ExecutorProfile, spec: ModelSpec, files: HostFiles
) -> tuple[ModelInfo | None, ModelInventory | None]:
    """`model_inventory` for the executor of `profile`."""
    if not profile.memory_flags:
        return model_facts_for(profile, spec, files), None
    if "\0" in spec.path or not files.exists(spec.path):
        return None, None
    try:
        inv = inventory_at(spec.path, files)
    except ModelUnreadable:
        raise
    except UnsizedTensors:
        return model_facts_for(profile, spec, files), None
    except EngineError:
        # A hostile header (tensors overlapping, a shard that is a FIFO or another file, a
        # set past the caps) is an error, never a plan without memory: the header's own
        # error first, where it has one, as before.
        model_facts_for(profile, spec, files)
        raise
    return info_from_inventory(spec.path, inv), inv


def info_from_inventory(path: str, inv: ModelInventory) -> ModelInfo:
    """The `ModelInfo` `inspect` gives, from an inventory read of the same file."""
    return ModelInfo(
        path=path,
        size=inv.sizes[0],
        architecture=inv.architecture,
        name=inv.name,
        quant=quant_name(inv.file_type),
        blocks=inv.blocks,
        context=inv.context,
        # An inventory made by hand has no header facts: they stay UNSET.
        chat_template=UNSET if inv.chat_template is None else inv.chat_template,
        tuning=UNSET if inv.chat_template is None else inv.tuning,
    )


def side_inventories(
    spec: ModelSpec, c: Constraints, files: HostFiles, *, executors: Executors = BUILTIN
) -> tuple[ModelInventory, ...]:
    """The inventories of the projector and draft model any layer names (``--mmproj``,
    ``--model-draft``), for those that can be read; the planner uses the ones its merged
    argv keeps."""
    return side_inventories_for(executors.profile(spec.kind), spec, c, files)


def side_inventories_for(
    p: ExecutorProfile, spec: ModelSpec, c: Constraints, files: HostFiles
) -> tuple[ModelInventory, ...]:
    """`side_inventories` for the executor of `p`."""
    keys = {p.memory_flags.get(r) for r in ("mmproj", "draft")} - {None}
    if not keys:
        return ()
    own = override_sections(c.overrides, spec) if c.overrides is not None else ()
    # The plan's own layers only: another model's projector is not this plan's, and is not read.
    lists = [spec.run_args, c.extra_args, *(o.args for o in own if o is not None)]
    paths: list[str] = []
    for args in lists:
        # Read as the merge reads them: ``--mmproj=P`` names P, ``--no-mmproj`` names nothing.
        for it in p.flags.read_items(args):
            if it.key in keys and it.values and it.values[0] not in paths:
                paths.append(it.values[0])
    out = []
    for path in paths:
        if "\0" not in path and files.exists(path):
            try:
                out.append(inventory_at(path, files))
            except EngineError:
                continue  # unreadable side models are planned without
    return tuple(out)


def model_facts(
    spec: ModelSpec, files: HostFiles, *, executors: Executors = BUILTIN
) -> ModelInfo | None:
    """The model's header when there is one to read; raises what `read_model` raises."""
    return model_facts_for(executors.profile(spec.kind), spec, files)


def model_facts_for(
    profile: ExecutorProfile, spec: ModelSpec, files: HostFiles
) -> ModelInfo | None:
    """`model_facts` for the executor of `profile`."""
    if "\0" in spec.path or not files.exists(spec.path):
        return None  # a NUL in the path is the planner's to refuse, naming it
    try:
        return read_model(spec.path, files)
    except NotGGUF:
        if profile.gguf:
            raise
        return None  # e.g. whisper models: ggml .bin files, whose header is not GGUF


def read_ports_in_use(
    files: HostFiles, kind: str, *, executors: Executors = BUILTIN
) -> frozenset[int]:
    """Ports the `kind` executor could not bind in this network namespace: from a netlink
    dump where the host offers one (`HostSockets`), else from /proc/net/tcp{,6}."""
    return ports_in_use_for(executors.profile(kind), files)


def ports_in_use_for(profile: ExecutorProfile, files: HostFiles) -> frozenset[int]:
    """`read_ports_in_use` for the executor of `profile`."""
    time_wait = profile.time_wait_blocks_bind
    if isinstance(files, HostSockets):
        dumped = files.tcp_ports(holding_states(time_wait=time_wait))
        if dumped is not None:
            return dumped
    return ports_in_use(
        *(files.read_text(p) or "" for p in ("/proc/net/tcp", "/proc/net/tcp6")),
        time_wait=time_wait,
    )
