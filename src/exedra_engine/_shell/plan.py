"""`plan`: the shell that gathers the planner's facts (the model header, the ports in use)
and calls the pure `plan_launch`."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from returns.result import Failure, Result, Success

from exedra_engine._core.config import LocatedConfig
from exedra_engine._core.executors import executor_profile
from exedra_engine._core.flags import FlagTable
from exedra_engine._core.inventory import ModelInventory
from exedra_engine._core.kinds import Kind
from exedra_engine._core.load_files import with_sizes
from exedra_engine._core.netstat import holding_states, ports_in_use
from exedra_engine._core.planner import Explained, explain_launch
from exedra_engine._core.quant import quant_name
from exedra_engine._core.values import Constraints, Hardware, LaunchPlan, ModelInfo, ModelSpec
from exedra_engine._shell.host import LocalHost
from exedra_engine._shell.inspect import inspect, read_inventory
from exedra_engine._shell.ports import HostFiles, HostSockets
from exedra_engine.errors import EngineError, ModelUnreadable, NotGGUF


def plan(
    spec: ModelSpec, hw: Hardware | None, constraints: Constraints = Constraints()
) -> Result[LaunchPlan, EngineError]:
    """Plan a launch: read the model's header and the ports in use, then plan purely.

    A missing model file is not an error here (dry runs in CI plan without the weights):
    the plan's `model` is then None. A file that exists but is not a GGUF model is an
    error for kind llama.
    """
    return plan_explained(spec, hw, constraints).map(lambda e: e.plan)


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
    host = files or LocalHost()
    in_use = read_ports_in_use(host, spec.kind) if check_ports else frozenset()
    return (
        model_inventory(spec, host)
        .bind(
            lambda facts: explain_launch(
                spec,
                hw,
                constraints,
                model=facts[0],
                ports_in_use=in_use,
                flags=flags,
                config_files=config_files,
                inventory=facts[1],
                side_models=side_inventories(spec, constraints, host),
            )
        )
        .map(lambda e: _sized(e, host))
    )


def _sized(e: Explained, files: HostFiles) -> Explained:
    """The plan with the size of every file it loads (the planner knows the header's only)."""
    sizes = {f.path: file_size(f.path, files) for f in e.plan.files if not f.size}
    if not any(sizes.values()):
        return e
    plan = msgspec.structs.replace(e.plan, files=with_sizes(e.plan.files, sizes))
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
    spec: ModelSpec, files: HostFiles
) -> Result[tuple[ModelInfo | None, ModelInventory | None], EngineError]:
    """The model's header and, for an executor whose memory is estimated, its tensor
    inventory (one read: the header's facts come from it). A header whose inventory cannot
    be read (a ggml type newer than this library) is planned without a memory plan."""
    if not executor_profile(spec.kind).memory_flags:
        return model_facts(spec, files).map(lambda m: (m, None))
    if "\0" in spec.path or not files.exists(spec.path):
        return Success((None, None))
    match read_inventory(spec.path, files):
        case Success(inv):
            return Success((info_from_inventory(spec.path, inv), inv))
        case Failure(ModelUnreadable() as e):
            return Failure(e)
    return model_facts(spec, files).map(lambda m: (m, None))


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
    )


def side_inventories(
    spec: ModelSpec, c: Constraints, files: HostFiles
) -> tuple[ModelInventory, ...]:
    """The inventories of the projector and draft model any layer names (``--mmproj``,
    ``--model-draft``), for those that can be read; the planner uses the ones its merged
    argv keeps."""
    p = executor_profile(spec.kind)
    keys = {p.memory_flags.get(r) for r in ("mmproj", "draft")} - {None}
    if not keys:
        return ()
    lists = [spec.run_args, c.extra_args]
    if c.overrides is not None:
        lists += [o.args for o in (*c.overrides.engines.values(), *c.overrides.models.values())]
    paths: list[str] = []
    for args in lists:
        for tok_i, tok in enumerate(args[:-1]):
            hit = p.flags.lookup(tok)
            if hit is not None and hit[0].key in keys and args[tok_i + 1] not in paths:
                paths.append(args[tok_i + 1])
    out = []
    for path in paths:
        if "\0" not in path and files.exists(path):
            got = read_inventory(path, files)
            if isinstance(got, Success):
                out.append(got.unwrap())
    return tuple(out)


def model_facts(spec: ModelSpec, files: HostFiles) -> Result[ModelInfo | None, EngineError]:
    """The model's header when there is one to read."""
    if "\0" in spec.path or not files.exists(spec.path):
        return Success(None)  # a NUL in the path is the planner's to refuse, naming it
    match inspect(spec.path, files):
        case Success(info):
            return Success(info)
        case Failure(NotGGUF()) if not executor_profile(spec.kind).gguf:
            return Success(None)  # e.g. whisper models: ggml .bin files, whose header is not GGUF
        case failed:
            return failed


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
