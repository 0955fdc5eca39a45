"""A group plan as a llama-swap configuration (emit only: nothing here runs llama-swap).

llama-swap (github.com/mostlygeek/llama-swap) is a proxy that starts each model's server on
demand and swaps them. Its ``groups`` say which models may run together: ``swap: false`` lets
a group's members run at once, ``exclusive: true`` unloads the other groups when one of its
members is asked for. It has no memory term, so the groups are made here from the memory
plan: members are packed, largest first, into groups whose planned resident totals fit the
group's budget together (first fit); then whatever group runs, what runs fits.

The fields written, and only these, are those of llama-swap's published schema
(``config-schema.json`` in its repository, read at commit cd46f56): top level
``healthCheckTimeout`` (integer, at least 15), ``models`` and ``groups``; per model ``cmd``
(required: the command line, split by llama-swap as a shell would), ``proxy`` (the URL it
routes to: the member's own address, since the port is the plan's, not llama-swap's
``${PORT}``), ``checkEndpoint`` (the ready path), ``env`` (``NAME=value`` strings) and
``name``; per group ``members`` (required), ``swap``, ``exclusive`` and ``persistent``.

llama-swap routes OpenAI's paths to the model a request names, audio included
(``/v1/audio/transcriptions``); whisper-server answers only ``/inference`` unless told, so
an executor that transcribes and has the flag (`AUDIO_ROUTE`) is told to serve that path.
"""

from __future__ import annotations

import math
import re
import shlex
from typing import Any

from exedra_engine._core.emit.checks import carried_secrets, text_problems
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.values import GroupPlan
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.secrets import plan_secrets
from exedra_engine._core.struct import freeze
from exedra_engine._core.values import base_url
from exedra_engine.errors import EmitError, EmitRefused

SCHEMA_FIELDS = freeze(
    {
        "": frozenset({"healthCheckTimeout", "models", "groups"}),
        "model": frozenset({"cmd", "proxy", "checkEndpoint", "env", "name"}),
        "group": frozenset({"members", "swap", "exclusive", "persistent"}),
    }
)
"""The fields this emitter writes, by where they stand: each is in llama-swap's schema."""
_ENV = re.compile(r"[A-Z_][A-Z0-9_]*=.*")
"""llama-swap's pattern for one ``env`` entry."""
_MIN_HEALTH = 15
AUDIO_ROUTE = ("--inference-path", "/v1/audio/transcriptions")
"""What a transcribing executor is given so that llama-swap's audio route reaches it
(whisper-server's flag; its default is ``/inference``)."""


def fitting_groups(group: GroupPlan) -> list[list[str]]:
    """The members packed, largest first, into groups whose planned resident totals fit the
    budget together (first fit); one group of all when the budget is unknown."""
    sizes = {s.id: _resident(group, s.id) for s in group.shares}
    if not group.budget:
        return [list(group.ids)]
    bins: list[tuple[int, list[str]]] = []
    for member in sorted(group.ids, key=lambda m: (-sizes[m], group.ids.index(m))):
        for i, (used, names) in enumerate(bins):
            if used + sizes[member] <= group.budget:
                bins[i] = (used + sizes[member], [*names, member])
                break
        else:
            bins.append((sizes[member], [member]))
    return [sorted(names, key=group.ids.index) for _, names in bins]


def _resident(group: GroupPlan, member: str) -> int:
    plan = group.plan_of(member)
    if plan.memory is not None:
        return plan.memory.host.total
    return next(s.memory for s in group.shares if s.id == member)


def llama_swap_config(
    group: GroupPlan, *, start_budget: float = 0, executors: Executors = BUILTIN
) -> dict[str, Any]:
    """The configuration as data (`dump` writes it): one model per member, one group per
    set of members that fit together."""
    models: dict[str, Any] = {}
    for plan in group.plans:
        models[plan.spec.id] = _model(plan, executors)
    groups = {
        f"fits-{i + 1}": {"members": names, "swap": False, "exclusive": True, "persistent": False}
        for i, names in enumerate(fitting_groups(group))
    }
    return {
        "healthCheckTimeout": max(_MIN_HEALTH, math.ceil(start_budget or 120)),
        "models": models,
        "groups": groups,
    }


def _model(plan: LaunchPlan, executors: Executors) -> dict[str, Any]:
    member = plan.spec.id
    p = executors.profile(plan.spec.kind)
    if plan.api_key or any(e.partition("=")[0] == p.key_env for e in plan.env):
        raise EmitError(
            f"member {member}: its plan has an API key, which the llama-swap file would hold "
            "in clear; plan it without a key (llama-swap's own apiKeys guard its proxy)"
        )
    if problems := carried_secrets(plan, "llama-swap", executors=executors):
        raise EmitRefused(tuple(f"member {member}: {p}" for p in problems))
    env = list(plan.env)
    for e in env:
        if not _ENV.fullmatch(e):
            raise EmitError(
                f"member {member}: env {e.partition('=')[0]!r} is not a name llama-swap accepts"
            )
    out: dict[str, Any] = {
        "name": member,
        "cmd": shlex.join([plan.command, *plan.args, *_audio_route(plan, executors)]),
        "proxy": base_url(plan.host, plan.port),
        "checkEndpoint": plan.ready,
    }
    if env:
        out["env"] = env
    return out


def llama_swap_file(
    group: GroupPlan, *, start_budget: float = 0, executors: Executors = BUILTIN, path: str = ""
) -> str:
    """The configuration as `dump` writes it, refused (`EmitRefused`, naming the member)
    where it would carry a secret in the clear: what ``plan --emit`` refuses in each
    member's plan (`carried_secrets`), then the text read back for every member's secrets
    and for any secret by its look (`text_problems`)."""
    text = dump(llama_swap_config(group, start_budget=start_budget, executors=executors), path)
    keys = [
        k
        for p in group.plans
        for k in (p.api_key, *plan_secrets(p.args, p.env, executors=executors))
    ]
    if problems := text_problems("the llama-swap file", text, keys):
        raise EmitRefused(tuple(problems))
    return text


def _audio_route(plan: LaunchPlan, executors: Executors) -> tuple[str, ...]:
    """`AUDIO_ROUTE` for a member whose executor transcribes and knows the flag, unless its
    plan sets the path itself; else nothing."""
    p = executors.profile(plan.spec.kind)
    flag = AUDIO_ROUTE[0]
    if "asr" not in p.capabilities or p.flags.lookup(flag) is None:
        return ()
    if any(a == flag or a.startswith(f"{flag}=") for a in plan.args):
        return ()
    return AUDIO_ROUTE


def dump(config: dict[str, Any], path: str = "") -> str:
    """The configuration as YAML, with a header saying where it came from and, given the
    `path` it is written to, how to run llama-swap on it."""
    import yaml

    run = ""
    if path:
        run = f"# run: llama-swap --config {shlex.quote(path)} --listen 127.0.0.1:8080\n"
    header = (
        "# llama-swap configuration, emitted by exedra-engine from a group plan.\n"
        f"{run}"
        "# groups: members that fit the memory budget together (swap: false); asking for a\n"
        "# member of another group unloads this one (exclusive: true).\n"
    )
    return header + yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
