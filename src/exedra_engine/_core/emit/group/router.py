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

from exedra_engine._core.emit.checks import carried_secrets, text_problems
from exedra_engine._core.emit.keys import key_vars, plan_is_keyed
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.group.router_plan import plan_router
from exedra_engine._core.group.values import GroupPlan
from exedra_engine._core.plan.launch_plan import LaunchPlan, read_with
from exedra_engine._core.secrets import plan_secrets
from exedra_engine._core.struct import Value
from exedra_engine.errors import EmitError, EmitRefused, PlanError

_CUT = (";", "#", "\n", "\r")
GLOBAL_SECTION = "*"
"""The preset section llama.cpp applies to every model (``common/preset.cpp``): no member's."""


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
    shared_key(group, members, llama)
    secrets = refuse_carried(group, members, llama, executors)
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
    text = "\n".join(lines) + "\n"
    if problems := text_problems("the router preset", text, secrets):
        raise EmitRefused(tuple(problems))
    return RouterPreset(
        text=text,
        models_max=models_max(group, members),
        members=tuple(members),
        dropped=tuple(dropped),
    )


def shared_key(group: GroupPlan, members: Sequence[str], profile: ExecutorProfile) -> str:
    """The one API key every member of `members` has ("" when none has one), which the
    router requires of every request: `EmitError` naming the members when some have a key
    and others none, when their keys differ, or when a key is only in a file (a router
    serves its members with its own key, so a member's key is never dropped silently)."""
    plans = {m: group.plan_of(m) for m in members}
    keyed = [m for m, p in plans.items() if plan_is_keyed(p, profile)]
    if not keyed:
        return ""
    if open_ := [m for m in members if m not in keyed]:
        raise EmitError(
            f"some llama members have an API key ({', '.join(keyed)}) and some none "
            f"({', '.join(open_)}): one router serves them all with one key or none, so it "
            "would serve the keyed ones without theirs; give every llama member the same key "
            "(api_key_env) or none"
        )
    if filed := [m for m, p in plans.items() if not p.api_key]:
        raise EmitError(
            f"member {', '.join(filed)}: its key is set by a file or a flag the router cannot "
            "share; give every llama member the same key by its variable (api_key_env)"
        )
    keys: dict[str, list[str]] = {}
    for m, p in plans.items():
        keys.setdefault(p.api_key, []).append(m)
    if len(keys) > 1:
        held = " and ".join(f"({', '.join(ms)})" for ms in keys.values())
        raise EmitError(
            f"the llama members do not share one API key: {held} hold different keys, and "
            "one router serves them all with one key; give every llama member the same key"
        )
    return next(iter(keys))


def refuse_carried(
    group: GroupPlan, members: Sequence[str], profile: ExecutorProfile, executors: Executors
) -> list[str]:
    """`EmitRefused` where a member's section would carry a secret in the clear, as ``plan
    --emit`` refuses it (`carried_secrets`; the router's own key, its flags and variable,
    stays out of the file); else every member's secrets, which the preset's text must not
    hold anywhere (the router's key inside a value among them: `text_problems`)."""
    # The router's key only: a token flag (``--hf-token``) is a secret the file would carry.
    moved = frozenset(f for f in (profile.key_flag, profile.key_file_flag) if f)
    moved |= key_vars(profile)
    problems: list[str] = []
    keys: list[str] = []
    for m in members:
        plan = group.plan_of(m)
        found = carried_secrets(plan, "router preset", executors=executors, moved=moved)
        problems += [f"member {m}: {p}" for p in found]
        keys += [plan.api_key, *plan_secrets(plan.args, plan.env, executors=executors)]
    if problems:
        raise EmitRefused(tuple(problems))
    return keys


def preset_section(
    plan: LaunchPlan, profile: ExecutorProfile
) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """One member's section: its keys and values in the plan's order (the model first),
    and what was dropped as router-owned (`ExecutorProfile.router_owned`) or not
    expressible in a preset."""
    owned, model_flag = profile.router_owned, profile.model_flag
    member = plan.spec.id
    _check_section_name(member)
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
    dropped += _env_keys(plan, profile, out)
    if not model.startswith("/"):
        raise EmitError(
            f"member {member}: model {model!r} is not an absolute path (the router would "
            "resolve it against its own working directory)"
        )
    _check_value(member, model_flag, model)
    return (("model", model), *out.items()), tuple(dropped)


def _check_section_name(member: str) -> None:
    if (
        not member
        or member == GLOBAL_SECTION
        or any(c in member for c in "[]\n\r")
        or member != member.strip()
    ):
        raise EmitError(
            f"member id {member!r} cannot name a preset section (not empty, no '[', ']' or "
            f"line break, no outer blanks, not {GLOBAL_SECTION!r}, llama.cpp's section for "
            "every model)"
        )


def _env_keys(plan: LaunchPlan, profile: ExecutorProfile, out: dict[str, str]) -> list[str]:
    """The member's env put into its section (`out`) where a preset key says the same;
    what was dropped, and why."""
    member, dropped = plan.spec.id, []
    for name, value in read_with(plan, profile).env.items():
        flag = profile.flags.flag_for_env(name)
        if name in key_vars(profile):
            continue  # the router's own key (`shared_key`): in its environment, not the file
        owned = flag is None or flag.key in profile.router_owned
        if owned or not name.startswith(profile.env_prefix):
            dropped.append(f"{name} (not a preset key: set it in the router's environment)")
            continue
        assert flag is not None  # `owned` above
        _put(out, member, flag.key, _value(member, flag.key, (value,) if flag.nargs else (), False))
    return dropped


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
