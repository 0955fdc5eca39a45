"""A group's llama members as one llama.cpp router: a models preset INI for
``llama-server --models-preset FILE --models-max N``, and the router's own plan. Pure.

The preset format is llama.cpp's (``common/preset.cpp``, ``tools/server/README.md`` "Model
presets"): ``version = 1``, then one ``[name]`` section per model whose keys are flag names
without their dashes. Each member's section is linted here, not left to the router:

- the model source: ``model = PATH``, absolute (the router resolves a relative path against
  its own working directory);
- long-flag keys only: every flag of the plan is read with the executor's flag table and
  written under its canonical long name (``-c 512`` is ``ctx-size = 512``), a negation as
  ``false``; ``LLAMA_ARG_*`` variables of the plan become the keys of their flags;
- router-owned keys dropped: the router sets host, port and alias of each child itself and
  keeps API keys, TLS files and the ``models-*`` options to itself
  (``server-models.cpp``, ``unset_reserved_args``);
- refused with the member and the flag named: a flag the table does not know, one with two
  values or repeated (an INI section holds one value per key), a value the INI reader would
  cut (``;`` or ``#`` start a comment there) or strip.

``--models-max`` is computed from the memory plan: the most members that always fit
together, counting the largest first, so that whichever members the router holds at once,
their resident totals stay within the group's budget.
"""

from __future__ import annotations

from collections.abc import Sequence

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.group.router_plan import plan_router
from exedra_engine._core.group.values import GroupPlan
from exedra_engine._core.plan.reading import read_with
from exedra_engine._core.struct import Value
from exedra_engine._core.values import LaunchPlan
from exedra_engine.errors import EmitError, PlanError

_CUT = (";", "#", "\n", "\r")


class RouterPreset(Value, frozen=True, kw_only=True):
    """The router of a group's llama members: the preset's text, the ``--models-max`` the
    memory plan allows, the members it serves, and what the lint dropped (one line each)."""

    text: str
    models_max: int
    members: tuple[str, ...]
    dropped: tuple[str, ...] = ()


def models_max(group: GroupPlan, members: Sequence[str]) -> int:
    """The most of `members` that always fit together within the group's budget, counting
    the largest first; every member when the budget is unknown, at least one."""
    sizes = sorted((_resident(group, m) for m in members), reverse=True)
    if not group.budget or not all(sizes):
        return max(len(sizes), 1)
    total, n = 0, 0
    for size in sizes:
        if total + size > group.budget:
            break
        total, n = total + size, n + 1
    return max(n, 1)


def _resident(group: GroupPlan, member: str) -> int:
    """The member's planned resident total (its share when the plan has no memory plan)."""
    plan = group.plan_of(member)
    if plan.memory is not None:
        return plan.memory.host.total
    return next(s.memory for s in group.shares if s.id == member)


def router_preset(group: GroupPlan, *, executors: Executors = BUILTIN) -> RouterPreset:
    """The preset INI of `group`'s llama members (`EmitError` when it has none, or a
    section cannot be written as the plan says)."""
    llama = executors.profile("llama")
    members = [s.id for s, p in group.members if p.spec.kind == "llama"]
    if not members:
        raise EmitError(
            "the group has no llama member: a llama.cpp router serves llama models only"
        )
    lines = [
        f"; {llama.binary} {llama.router_preset_flag} (llama.cpp router mode), made by "
        "exedra-engine",
        "version = 1",
    ]
    dropped: list[str] = []
    for m in members:
        keys, why = preset_section(group.plan_of(m), llama)
        dropped += [f"{m}: {w}" for w in why]
        lines += ["", f"[{m}]", *(f"{k} = {v}" for k, v in keys)]
    return RouterPreset(
        text="\n".join(lines) + "\n",
        models_max=models_max(group, members),
        members=tuple(members),
        dropped=tuple(dropped),
    )


def preset_section(
    plan: LaunchPlan, profile: ExecutorProfile
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """One member's section: its keys and values in the plan's order (the model first),
    and what was dropped as router-owned (`ExecutorProfile.router_owned`) or not
    expressible in a preset."""
    flags, owned, model_flag = profile.flags, profile.router_owned, profile.model_flag
    member = plan.spec.id
    if not member or any(c in member for c in "[]\n\r") or member != member.strip():
        raise EmitError(f"member id {member!r} cannot name a preset section")
    out: dict[str, str] = {}
    dropped: list[str] = []
    model = plan.spec.path
    for it in _items(plan, profile):
        if it.key is None:
            raise EmitError(f"member {member}: {it.name} is not a flag {profile.binary} knows")
        if it.key in owned:
            dropped.append(f"{it.key} (set by the router)")
            continue
        if it.key == model_flag:
            model = it.values[0]
            continue
        _put(out, member, it.key, _value(member, it.key, it.values, it.negated))
    for entry in plan.env:
        name, _, value = entry.partition("=")
        flag = flags.flag_for_env(name)
        if flag is None or flag.key in owned or not name.startswith(profile.env_prefix):
            dropped.append(f"{name} (not a preset key: set it in the router's environment)")
            continue
        _put(out, member, flag.key, _value(member, flag.key, (value,) if flag.nargs else (), False))
    if not model.startswith("/"):
        raise EmitError(
            f"member {member}: model {model!r} is not an absolute path (the router would "
            "resolve it against its own working directory)"
        )
    _check_value(member, model_flag, model)
    return (("model", model), *out.items()), tuple(dropped)


def _items(plan: LaunchPlan, profile: ExecutorProfile) -> tuple[Item, ...]:
    """The member's argv as its reading has it; an argv the executor refuses, named."""
    try:
        return read_with(plan, profile).items
    except PlanError as e:
        raise PlanError(f"member {plan.spec.id}: {e}") from None


def _value(member: str, key: str, values: tuple[str, ...], negated: bool) -> str:
    if len(values) > 1:
        raise EmitError(f"member {member}: {key} takes {len(values)} values; a preset holds one")
    if not values:
        return "false" if negated else "true"
    _check_value(member, key, values[0])
    return values[0]


def _check_value(member: str, key: str, value: str) -> None:
    if any(c in value for c in _CUT) or value != value.strip():
        raise EmitError(
            f"member {member}: {key} {value!r}: the preset reader would cut it (a ';' or '#' "
            "starts a comment there, a line ends the value, spaces around it are stripped)"
        )


def _put(out: dict[str, str], member: str, key: str, value: str) -> None:
    name = key.lstrip("-")
    if name in out and out[name] != value:
        raise EmitError(f"member {member}: {key} is given twice; a preset section holds one value")
    out[name] = value


def router_plan(
    group: GroupPlan,
    preset_path: str,
    preset: RouterPreset,
    *,
    executors: Executors = BUILTIN,
) -> LaunchPlan:
    """The plan of the router itself, serving `preset` (written at `preset_path`), made by
    the group planner (`exedra_engine._core.group.router_plan.plan_router`)."""
    return plan_router(group, preset_path, preset.members, preset.models_max, executors=executors)
