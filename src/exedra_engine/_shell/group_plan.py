"""`plan_group_on_host` and `load_group`: the shells of the group planner. They gather what
the pure `plan_group` takes as arguments (each member's model header, tensor inventory and
file size, the ports in use, the CPUs this process may run on) and read group files."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import msgspec

from exedra_engine._core.config.parse import LocatedConfig
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.file import GroupFile, parse_group_file
from exedra_engine._core.group.memory import Running
from exedra_engine._core.group.planner import GroupExplained, explain_group_plan
from exedra_engine._core.group.values import GroupMember, GroupPlan, MemberFacts
from exedra_engine._core.outcome import as_result, boundary
from exedra_engine._core.struct import Value
from exedra_engine._core.values import Constraints, Hardware
from exedra_engine._shell.local.host import LocalHost
from exedra_engine._shell.local.ports import HostFiles
from exedra_engine._shell.plan import (
    file_size,
    model_inventory,
    read_ports_in_use,
    side_inventories,
    sized,
)
from exedra_engine.errors import ConfigError, EngineError, NotGGUF, PlanError

if TYPE_CHECKING:
    from returns.result import Result


class GroupRequest(Value, frozen=True, kw_only=True):
    """What a group plan is made from, named (as `PlanRequest` is for one plan)."""

    members: tuple[GroupMember, ...]
    hardware: Hardware | None
    constraints: Constraints = Constraints()
    config_files: tuple[LocatedConfig, ...] = ()
    check_ports: bool = True
    """Without it the group is planned as if every port were free (for another machine)."""
    this_host: bool = True
    """The hardware is this machine's: the CPU ids are this process's affinity. False (a
    hardware file): ``0..threads-1``."""
    running: tuple[Running, ...] = ()
    executors: Executors = BUILTIN
    origins: tuple[str, ...] = ()
    """How an error names each member (``group.yaml:4: members[1] (asr)``, `MemberEntry.where`);
    empty: by its id."""
    weigh: bool = False
    """Count the weight copies each member's binary makes, from one short load per binary,
    model and placement (`exedra_engine._shell.extra_buffers`, cached): a group planned on
    this host to run here."""


def plan_group_on_host(
    members: Sequence[GroupMember],
    hw: Hardware | None,
    constraints: Constraints = Constraints(),
    *,
    running: Sequence[Running] = (),
    check_ports: bool = True,
    executors: Executors = BUILTIN,
) -> Result[GroupPlan, EngineError]:
    """Plan a group on this machine: read each member's model header and size, the ports
    in use and this process's CPUs, then plan purely (`plan_group`). `running` are
    executors the group joins (their plans or `Instance.actual`). Without `check_ports`
    every port is taken as free and the CPU ids as ``0..threads-1`` (a dry run for
    another machine)."""
    req = GroupRequest(
        members=tuple(members),
        hardware=hw,
        constraints=constraints,
        check_ports=check_ports,
        this_host=check_ports,
        running=tuple(running),
        executors=executors,
    )
    return as_result(explain_group_request, req, explain=False).map(lambda e: e.plan)


def explain_group_request(
    req: GroupRequest,
    files: HostFiles | None = None,
    *,
    flags: dict[str, FlagTable] | None = None,
    explain: bool = True,
) -> GroupExplained:
    """The group plan of a request, explained, raising its `EngineError` (for the command
    line)."""
    host = files or LocalHost()
    ex = req.executors
    # Each kind skips the ports its own executor cannot bind (whisper-server: TIME_WAIT too),
    # so a member's port does not move because a member of another kind joined.
    by_kind: dict[str, frozenset[int]] = {}
    if req.check_ports:
        for kind in dict.fromkeys(m.spec.kind for m in req.members):
            by_kind[kind] = read_ports_in_use(host, kind, executors=ex)
    reads = _Reads(host, ex)
    facts = tuple(
        _named_facts(m, req, reads, req.origins[i] if req.origins else f"member {m.spec.id}")
        for i, m in enumerate(req.members)
    )

    def planned(facts: tuple[MemberFacts, ...]) -> GroupExplained:
        return explain_group_plan(
            req.members,
            req.hardware,
            req.constraints,
            facts=facts,
            kind_ports_in_use=by_kind,
            cpus=_affinity() if req.this_host else None,
            running=req.running,
            flags=flags,
            config_files=req.config_files,
            executors=ex,
            explain=explain,
        )

    e = planned(facts)
    if req.weigh:
        e = _weighed(e, facts, planned, flags or {}, ex)
    elif not req.this_host:
        e = _unweighed(e, ex)
    members = tuple(sized(m, reads.size) for m in e.members)
    plan = msgspec.structs.replace(e.plan, plans=tuple(m.plan for m in members))
    return msgspec.structs.replace(e, plan=plan, members=members)


def _weighed(
    e: GroupExplained,
    facts: tuple[MemberFacts, ...],
    planned: Callable[[tuple[MemberFacts, ...]], GroupExplained],
    flags: dict[str, FlagTable],
    ex: Executors,
) -> GroupExplained:
    """The group planned again with the weight copies each member's binary makes (one short
    load per binary, model and placement, cached: members that share them share it), so
    that the shares count them; a member whose copies could not be measured says why."""
    from exedra_engine._shell.extra_buffers import plan_weight_buffers

    found = [
        plan_weight_buffers(m.plan, ex.profile(m.plan.spec.kind), table=flags.get(m.plan.spec.kind))
        for m in e.members
    ]
    if any(wb is not None for wb, _ in found):
        wbs = tuple(wb for wb, _ in found)
        e = planned(
            tuple(
                msgspec.structs.replace(f, weight_buffers=w)
                for f, w in zip(facts, wbs, strict=True)
            )
        )
    members = tuple(
        msgspec.structs.replace(m, memory=(*m.memory, why)) if why else m
        for m, (_, why) in zip(e.members, found, strict=True)
    )
    return msgspec.structs.replace(e, members=members)


def _unweighed(e: GroupExplained, ex: Executors) -> GroupExplained:
    """A group planned from a hardware file: each member with a memory plan says that the
    weight copies of its build were not measured (a dry run runs nothing)."""
    from exedra_engine._shell.extra_buffers import NOT_MEASURED

    members = tuple(
        msgspec.structs.replace(m, memory=(*m.memory, NOT_MEASURED))
        if m.plan.memory is not None and ex.profile(m.plan.spec.kind).memory_flags
        else m
        for m in e.members
    )
    return msgspec.structs.replace(e, members=members)


def _named_facts(m: GroupMember, req: GroupRequest, reads: _Reads, where: str) -> MemberFacts:
    """`member_facts` (each path read once, `reads`), a fault of the model named with the
    member (`where`); a ggml file (whisper.cpp's) given to a GGUF executor gets the kind
    that loads it as a hint."""
    try:
        return reads.facts(m, req.constraints)
    except NotGGUF as e:
        hint = ""
        if _magic(m.spec.path, reads.files) == _GGML_MAGIC:
            hint = "; it is a ggml file, as whisper.cpp's models are: kind: transcribe?"
        raise ConfigError(f"{where}: model {m.spec.path}: {e}{hint}") from None
    except EngineError as e:
        raise _with_prefix(e, where) from None


_GGML_MAGIC = b"lmgg"
"""The first bytes of a ggml model file (whisper.cpp's): 0x67676d6c, little-endian."""


def _magic(path: str, files: HostFiles) -> bytes:
    try:
        stream, _ = files.open_file(path)
    except OSError:
        return b""
    with stream:
        return stream.read(4)


def _with_prefix(e: EngineError, where: str) -> EngineError:
    """`e`, of its own class where it can be made again, naming the member first."""
    try:
        return type(e)(f"{where}: {e}")
    except TypeError:  # a class whose constructor takes more than a message
        return e


def member_facts(
    m: GroupMember, group: Constraints, files: HostFiles, *, executors: Executors = BUILTIN
) -> MemberFacts:
    """What is read of one member's model: its header and inventory (as `plan` reads
    them), its side models and the file's size."""
    model, inventory = model_inventory(m.spec, files, executors=executors)
    c = m.constraints
    if c.overrides is None and group.overrides is not None:
        c = msgspec.structs.replace(c, overrides=group.overrides)
    return MemberFacts(
        model=model,
        inventory=inventory,
        side_models=side_inventories(m.spec, c, files, executors=executors),
        file_size=file_size(m.spec.path, files),
    )


class _Reads:
    """What one group plan reads of its members' files, each path read once: members that
    name one model share its header, inventory and size (a group of many members on one
    file would otherwise cost a header read, and an inventory held, per member)."""

    def __init__(self, files: HostFiles, executors: Executors) -> None:
        self.files, self.executors = files, executors
        self._facts: dict[tuple[object, ...], MemberFacts] = {}
        self._sizes: dict[str, int] = {}

    def facts(self, m: GroupMember, group: Constraints) -> MemberFacts:
        c = m.constraints
        # What `member_facts` reads depends on the kind, the model, and the layers that may
        # name a side model (values, hashable): equal ones read the same files.
        over = c.overrides if c.overrides is not None else group.overrides
        key = (m.spec.kind, m.spec.path, m.spec.run_args, c.extra_args, over)
        got = self._facts.get(key)
        if got is None:
            got = member_facts(m, group, self.files, executors=self.executors)
            self._facts[key] = got
        return got

    def size(self, path: str) -> int:
        got = self._sizes.get(path)
        if got is None:
            got = self._sizes[path] = file_size(path, self.files)
        return got


def _affinity() -> tuple[int, ...] | None:
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return None


def read_group(
    path: str | os.PathLike[str], *, executors: Executors = BUILTIN
) -> tuple[GroupMember, ...]:
    """Read a group file (`exedra_engine._core.group.file`) into its members, each API key
    read from the variable its ``api_key_env`` names. A mistake names the file, the line
    and the member (`ConfigError`); a key variable that is not set, the member
    (`PlanError`)."""
    return file_members(read_group_file(os.fspath(path), executors=executors), os.environ)


load_group = boundary(read_group)
"""`read_group` as a Result: ``Success(members)``, or ``Failure`` with its `EngineError`."""


def read_group_file(path: str, *, executors: Executors = BUILTIN) -> GroupFile:
    """The parsed group file at `path`, its paths made absolute (`resolve_paths`);
    `ConfigError` when it cannot be read. A FIFO or a device is refused at once, never
    waited on, as ``--config`` and ``--hardware`` files are."""
    from exedra_engine._shell.local.files import read_regular

    try:
        text = read_regular(path, 1 << 20).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise ConfigError(f"{path}: cannot read the group file: {why}", file=path) from None
    if len(text) > 1 << 20:
        raise ConfigError(f"{path}: the group file is larger than 1 MiB", file=path)
    return resolve_paths(parse_group_file(text, path, executors=executors))


def resolve_paths(g: GroupFile) -> GroupFile:
    """`g` with each member's ``model`` and ``executor`` as the file means them wherever
    it is read from: ``~`` expanded, a relative path joined to the file's directory."""
    base = os.path.dirname(os.path.abspath(g.source))

    def where(p: str) -> str:
        p = os.path.expanduser(p)
        return p if os.path.isabs(p) else os.path.normpath(os.path.join(base, p))

    members = tuple(
        msgspec.structs.replace(
            e,
            spec=msgspec.structs.replace(e.spec, path=where(e.spec.path)),
            executor=where(e.executor) if e.executor else "",
        )
        for e in g.members
    )
    return msgspec.structs.replace(g, members=members)


def model_problem(g: GroupFile, *, launching: bool = False) -> ConfigError | None:
    """Why the file's members cannot be run on this host (None: they can): the first model
    that does not exist, or (`launching`) is no regular file, or an ``executor`` that is no
    executable file; named by file, line and member."""
    for i, e in enumerate(g.members):
        why = _not_a_file(e.spec.path, launching=launching)
        if why:
            return ConfigError(
                f"{e.where(g.source, i, e.model_line)}: model {e.spec.path} {why}",
                file=g.source,
                line=e.model_line,
            )
        if e.executor:
            why = _not_a_file(e.executor, launching=True)
            if not why and not os.access(e.executor, os.X_OK):
                why = "is not executable"
            if why:
                return ConfigError(
                    f"{e.where(g.source, i, e.executor_line)}: executor {e.executor} {why}",
                    file=g.source,
                    line=e.executor_line,
                )
    return None


def _not_a_file(path: str, *, launching: bool) -> str:
    if not os.path.exists(path):
        return "does not exist"
    if not launching or os.path.isfile(path):
        return ""
    if os.path.isdir(path):
        return "is a directory"
    return "is not a regular file (a FIFO, a socket or a device)"


def file_members(
    g: GroupFile, environ: dict[str, str] | os._Environ[str]
) -> tuple[GroupMember, ...]:
    """The file's entries as members, each API key read from its variable."""
    out = []
    for i, e in enumerate(g.members):
        c = e.constraints
        if c.api_key_env:
            key = environ.get(c.api_key_env, "")
            if not key:
                state = "empty" if c.api_key_env in environ else "not set"
                raise PlanError(
                    f"{g.source}:{e.line}: members[{i}] ({e.spec.id}): api_key_env: "
                    f"variable {c.api_key_env} is {state}"
                )
            c = msgspec.structs.replace(c, api_key=key)
        out.append(GroupMember(spec=e.spec, constraints=c, weight=e.weight, executor=e.executor))
    return tuple(out)
