"""A plan read once: its argv and env as the executor reads them, and every fact derived
from them (the endpoint, the ready path, the files it loads, its memory settings).

The planner builds the reading of a fresh plan from its one merge and records it, so the
plan is never cut into items again; any other plan (edited with ``msgspec.structs.replace``,
decoded from JSON) is a new value, read once when first asked for. Everything that needs a
fact of a finished plan asks `read_plan` for it instead of reading the argv back.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import accumulate
from typing import NamedTuple

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.memory.settings import MemorySettings, settings_of
from exedra_engine._core.plan.endpoint import Resolved, env_dict, resolve_for
from exedra_engine._core.plan.layers import Merged
from exedra_engine._core.plan.load_files import load_files
from exedra_engine._core.struct import EMPTY, Value, freeze, frozen_fields
from exedra_engine._core.values import LaunchPlan, ModelFile, ModelInfo
from exedra_engine.errors import NoEndpoint, PlanError


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
    """The reading of `plan` (see the module): recorded by the planner for a plan it made,
    else read now, once per distinct plan. Raises `PlanError` for an argv the executor
    would refuse and `UnsupportedKind` for a kind `executors` does not have; an endpoint it
    cannot read is kept as why (`PlanReading.resolved`)."""
    return read_with(plan, executors.profile(plan.spec.kind))


def read_with(plan: LaunchPlan, profile: ExecutorProfile) -> PlanReading:
    """`read_plan` where the profile of the plan's kind is at hand."""
    got = _READ.get((plan, profile))
    if isinstance(got, PlanReading):
        return got
    reading = read_afresh(plan, profile) if got is None else _from_merge(profile, got)
    remember(plan, profile, reading)
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


def remember(
    plan: LaunchPlan, profile: ExecutorProfile, reading: PlanReading | MergeReading
) -> None:
    """Record `reading` as the reading of `plan` (the planner's, from its merge)."""
    if len(_READ) >= _READ_MAX:
        # The oldest goes: plans are read soon after they are made. (Another thread may
        # have taken it first; a memo loses nothing but time.)
        oldest = next(iter(_READ), None)
        if oldest is not None:
            _READ.pop(oldest, None)
    _READ[plan, profile] = reading


def with_files(
    plan: LaunchPlan, files: tuple[ModelFile, ...], profile: ExecutorProfile
) -> LaunchPlan:
    """The plan with `files` (the same files, sized by a shell that read them): its argv
    and env are unchanged, so its reading is carried over, not read again."""
    out = msgspec.structs.replace(plan, files=files)
    got = _READ.get((plan, profile))
    remember(out, profile, got if got is not None else read_with(plan, profile))
    return out


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


# Readings by plan and profile (both frozen, hashable values): a pure function's memo,
# bounded, so a long-lived process planning many plans holds only the latest.
_READ: dict[tuple[LaunchPlan, ExecutorProfile], PlanReading | MergeReading] = {}
_READ_MAX = 256
