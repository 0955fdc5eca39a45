"""A launch plan, and the plan read once: its argv and env as the executor reads them, and
every fact derived from them (the endpoint, the ready path, the files it loads, its memory
settings).

`LaunchPlan.host`, `port`, `api_key` and `files` are views of the plan's reading: whenever a
plan is made (by the planner, by ``msgspec.structs.replace``, by decoding JSON) they are set
from its argv and env, so they cannot disagree with them. They are fields only so that the
plan's JSON carries them.

A plan holds its reading. The planner hands the reading of its one merge to the plan it
makes, so that plan's argv is never cut into items again; any other plan (edited, decoded) is
read once, when it is made. Everything that needs a fact of a finished plan asks `read_plan`
for it instead of reading the argv back.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import accumulate
from typing import Any, NamedTuple

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.memory.plan import MemoryPlan
from exedra_engine._core.memory.settings import MemorySettings, settings_of
from exedra_engine._core.plan.endpoint import Resolved, env_dict, resolve_for
from exedra_engine._core.plan.layers import Merged
from exedra_engine._core.plan.load_files import load_files
from exedra_engine._core.secrets import REDACTED, redact_shown
from exedra_engine._core.struct import EMPTY, Value, freeze, frozen_fields
from exedra_engine._core.values import ModelFile, ModelInfo, ModelSpec, base_url
from exedra_engine.errors import EngineError, NoEndpoint, PlanError


class LaunchPlan(Value, frozen=True, kw_only=True, omit_defaults=True, dict=True):
    """A serializable launch decision.

    `args` and `env` may be replaced (``msgspec.structs.replace``) before launching; `host`,
    `port`, `api_key` and `files` are views of them (see the module): read from them whenever
    a plan is made, never set separately. `command`, `spec`, `model` and `ready` are kept as
    planned. For a kind added through `Executors`, whose profile a plan does not carry, the
    views are set only when the plan is made from a reading by that kind's profile (the
    planner's, or `edited` of a plan `read_plan` has read), else kept as given; `read_plan`
    and `launch` read the argv with that profile either way.
    """

    spec: ModelSpec
    model: ModelInfo | None = None
    command: str
    args: tuple[str, ...]
    env: tuple[str, ...] = ()
    """KEY=VALUE strings added to the executor's environment."""
    host: str
    port: int
    api_key: str = ""
    key_env: str = ""
    """The variable the caller's key was read from (``--api-key-env``), "" when it was given
    as a value. A plan saved for people carries the key as ``<redacted>``; this names where
    the real one lives. Launching never reads it: a plan holding the marker is refused."""
    ready: str
    """Readiness HTTP path."""
    files: tuple[ModelFile, ...] = ()
    """Every file the executor reads at load, with its size (see `ModelFile`): the files are
    the argv's; a size given here (one a shell read) is kept over the header's."""
    memory: MemoryPlan | None = None
    """What the executor is expected to use, and whether it fits (see `MemoryPlan`)."""
    port_scanned: bool = False
    """True when the planner chose `port` by scanning, so `launch` may move it to the next
    free port if another process binds it first; an explicit port is never moved."""

    def __post_init__(self) -> None:
        _derive(self)

    @property
    def url(self) -> str:
        """The instance base address; wildcard binds are reached on loopback."""
        return base_url(self.host, self.port)

    def shown_fields(self) -> dict[str, Any]:
        # No `Executors` value here to say which flags of an added executor are secret: for
        # a built-in kind `redact_shown` also hides after any flag whose name reads as one,
        # and the key's copies; for any other kind, every value.
        key = REDACTED if self.api_key else ""
        args, env = redact_shown(
            self.args, self.env, api_key=self.api_key, every_value=self.spec.kind not in BUILTIN
        )
        return {
            "command": self.command,
            "args": args,
            "env": env,
            "host": self.host,
            "port": self.port,
            "api_key": key,
            "ready": self.ready,
        }

    def __repr__(self) -> str:
        return self.shown_repr()


class PlanReading(Value, frozen=True, kw_only=True):
    """A plan's argv and env as its executor reads them, and what follows from them."""

    items: tuple[Item, ...]
    """The argv as the flag table reads it (each `Item.at` is in the plan's argv)."""
    settings: dict[str, tuple[str, ...]] = EMPTY
    """The winning values of the non-repeatable known flags, by canonical key."""
    env: dict[str, str] = EMPTY
    """The plan's env by name."""
    endpoint: Resolved | None = None
    """Where it listens and the keys it accepts; None when its argv and env name no
    endpoint the executor would take (`resolved` raises why)."""
    refused: tuple[str, ...] = ()
    """Why there is no `endpoint`: the error's class name and its message."""
    ready: str
    """The readiness path, under the prefix the argv or env sets."""
    files: tuple[ModelFile, ...] = ()
    """Every file it loads, sized from the header where known (the plan's own `files` may
    carry sizes a shell read since)."""
    memory: MemorySettings | None = None
    """Its memory settings, for an executor whose memory is estimated."""

    def __post_init__(self) -> None:
        frozen_fields(self, "settings", "env")

    def resolved(self) -> Resolved:
        """`endpoint`, raising what reading it raised (`NoEndpoint`, `PlanError`)."""
        if self.endpoint is not None:
            return self.endpoint
        name, message = self.refused
        raise (NoEndpoint if name == NoEndpoint.__name__ else PlanError)(message)


def read_plan(plan: LaunchPlan, executors: Executors = BUILTIN) -> PlanReading:
    """The reading of `plan` (see the module), which the plan holds: the planner's for a plan
    it made, else read when the plan was made or now, once per plan and profile. Raises
    `PlanError` for an argv the executor would refuse and `UnsupportedKind` for a kind
    `executors` does not have; an endpoint it cannot read is kept as why
    (`PlanReading.resolved`)."""
    return read_with(plan, executors.profile(plan.spec.kind))


def read_with(plan: LaunchPlan, profile: ExecutorProfile) -> PlanReading:
    """`read_plan` where the profile of the plan's kind is at hand."""
    got = plan.__dict__.get(_HELD)
    if got is not None and (got[0] is profile or got[0] == profile):
        if isinstance(got[1], PlanReading):
            return got[1]
        reading = _from_merge(profile, got[1])
    else:
        reading = read_afresh(plan, profile)
    plan.__dict__[_HELD] = (profile, reading)
    return reading


class MergeReading(NamedTuple):
    """What the planner derived from the merge of a plan it made (`merge_reading`): the
    reading is made from it, without reading the argv, when someone first asks for it."""

    m: Merged
    endpoint: Resolved
    ready: str
    files: tuple[ModelFile, ...]
    model: ModelInfo | None


def merge_reading(
    profile: ExecutorProfile, m: Merged, endpoint: Resolved, model: ModelInfo | None
) -> MergeReading:
    """The endpoint (read from the merge by the planner), the ready path and the files of
    the plan made from `m`, its merge: what the planner needs at once."""
    ready = ready_path(profile, m.settings, m.env_map)
    return MergeReading(m, endpoint, ready, load_files(profile, m.items, m.env_map, model), model)


def remember(profile: ExecutorProfile, reading: MergeReading) -> None:
    """Hand `reading`, the planner's from its merge, to the plan it is about to make of that
    merge: the plan holds it, its views are set from it, and nothing is read again."""
    m = reading.m
    _HANDOFF[0] = (profile.kind, m.args, m.env, reading.model, (profile, reading))


def edited(plan: LaunchPlan, **changes: Any) -> LaunchPlan:
    """``msgspec.structs.replace(plan, **changes)`` for changes that leave its argv, env and
    header as they are (its memory, its files' sizes): the new plan holds `plan`'s reading
    instead of reading its argv again."""
    got = plan.__dict__.get(_HELD)
    if got is not None:
        _HANDOFF[0] = (plan.spec.kind, plan.args, plan.env, plan.model, got)
    return msgspec.structs.replace(plan, **changes)


def _derive(plan: LaunchPlan) -> None:
    # The views of a plan being made (`LaunchPlan.__post_init__`), from the reading handed
    # to it (`remember`, `edited`), else from reading it now with the built-in profile of its
    # kind. The plan holds the reading from then on (`read_with`).
    h = _HANDOFF[0]
    held = h[4]
    if (
        held is not None
        and h[1] is plan.args
        and h[2] is plan.env
        and h[3] is plan.model
        and h[0] == plan.spec.kind
    ):
        _HANDOFF[0] = _NOTHING  # taken: the plan holds it, the slot does not
    elif plan.spec.kind in BUILTIN:
        profile = BUILTIN.profile(plan.spec.kind)
        try:
            held = (profile, read_afresh(plan, profile))
        except EngineError:
            return  # an argv the executor refuses: `read_plan` raises why when asked
    else:
        return  # an added kind no one has read yet: as given (see `LaunchPlan`)
    plan.__dict__[_HELD] = held
    reading = held[1]
    e = reading.endpoint
    if e is not None and (plan.port != e.port or plan.host != e.host or plan.api_key != e.api_key):
        msgspec.structs.force_setattr(plan, "host", e.host)
        msgspec.structs.force_setattr(plan, "port", e.port)
        msgspec.structs.force_setattr(plan, "api_key", e.api_key)
    files = reading.files
    if plan.files is not files and plan.files != files:
        msgspec.structs.force_setattr(plan, "files", _sized(files, plan.files))


def _sized(files: tuple[ModelFile, ...], given: tuple[ModelFile, ...]) -> tuple[ModelFile, ...]:
    # The argv's files; where the given ones carry a size for a path (a shell read it since
    # the header was), that size.
    sizes = {f.path: f.size for f in given if f.size}
    return tuple(
        f
        if sizes.get(f.path, f.size) == f.size
        else ModelFile(path=f.path, size=sizes[f.path], role=f.role)
        for f in files
    )


def _from_merge(profile: ExecutorProfile, g: MergeReading) -> PlanReading:
    # The merge's items stand where they stood in their layers, and a ``--flag=value`` there
    # is two tokens of the merged argv: placed in the plan's argv, they are its reading.
    m = g.m
    starts = accumulate((len(it.tokens) for it in m.items), initial=0)
    items = tuple(
        it if it.at == at and not it.inline else msgspec.structs.replace(it, at=at, inline=False)
        for it, at in zip(m.items, starts, strict=False)
    )
    return PlanReading(
        items=items,
        settings=m.settings,
        env=m.env_map,
        endpoint=g.endpoint,
        ready=g.ready,
        files=g.files,
        memory=settings_of(profile, items, m.env) if profile.memory_flags else None,
    )


def read_afresh(plan: LaunchPlan, profile: ExecutorProfile) -> PlanReading:
    """`read_with` without its record: the plan's argv and env read now (what a plan the
    planner did not make is read with; the planner's own reading equals it)."""
    env = env_dict(plan.env)
    # The endpoint first, as the executor reads it: its refusals are the ones people meet.
    endpoint: Resolved | None = None
    refused: tuple[str, ...] = ()
    try:
        endpoint = resolve_for(profile, plan.args, env)
    except (NoEndpoint, PlanError) as e:
        refused = (type(e).__name__, str(e))
    items = profile.flags.split_items(plan.args, "plan args")
    settings = {it.key: it.values for it in items if it.key is not None}
    for key in profile.flags.repeatable_keys.intersection(settings):
        del settings[key]
    return PlanReading(
        items=items,
        settings=freeze(settings),
        env=freeze(env),
        endpoint=endpoint,
        refused=refused,
        ready=ready_path(profile, settings, env),
        files=load_files(profile, items, env, plan.model),
        memory=settings_of(profile, items, plan.env) if profile.memory_flags else None,
    )


def ready_path(
    profile: ExecutorProfile, settings: Mapping[str, tuple[str, ...]], env: Mapping[str, str]
) -> str:
    """The readiness path, under the prefix an argv's `settings` or its `env` sets
    (llama-server's ``--api-prefix``, whisper-server's ``--request-path``)."""
    p = profile
    flag = settings.get(p.ready_prefix_flag) if p.ready_prefix_flag else None
    if flag:
        prefix = flag[0]
    elif p.ready_prefix_env:
        # The merge keeps one form of a setting: the variable only when no flag won.
        prefix = env.get(p.ready_prefix_env, "")
    else:
        prefix = ""
    return prefix.rstrip("/") + p.ready_path


# A plan holds its reading in its ``__dict__`` (a msgspec ``dict=True`` struct: neither
# encoded, nor compared, nor hashed), under this name, with the profile that read it.
_HELD = "_reading"

# The planner's reading on its way to the plan it is making (`remember`, `edited`): taken by
# that plan's ``__post_init__``, matched by identity of its argv, env and header, so a plan
# made meanwhile (another thread's) never takes it, and reads its own argv instead. One
# slot, not a store: the only module-level state of `_core` (see its caption).
_Held = tuple[ExecutorProfile, "PlanReading | MergeReading"]
_Handoff = tuple[
    str, tuple[str, ...] | None, tuple[str, ...] | None, ModelInfo | None, _Held | None
]
_NOTHING: _Handoff = ("", None, None, None, None)
_HANDOFF: list[_Handoff] = [_NOTHING]
