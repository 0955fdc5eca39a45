"""A plan with its explanation (`Explained`: provenance, findings, memory arithmetic), and a
plan as it may be shown (`redact_plan`): every secret the walker finds hidden where it
stands, and its value hidden wherever it was copied. Pure.

Plan rendering (text and ``--json``), ``--explain`` and `Explained`'s repr come through
here, so one table (`exedra_engine._core.secrets`) decides for all of them what is secret.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, TypeVar

import msgspec

from exedra_engine._core.config.findings import Finding, shown_findings
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.plan.provenance import Provenance, Source, redact_provenance, shown_source
from exedra_engine._core.secrets import (
    ENGINE_LAYER,
    REDACTED,
    Hider,
    plan_secrets,
    redact_args,
)
from exedra_engine._core.struct import Value


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


def shown_explained(e: Explained, *, executors: Executors = BUILTIN) -> dict[str, Any]:
    """`Explained`'s fields as its repr shows them: the plan as printed, and its sources,
    provenance and findings with the plan's secrets hidden."""
    secrets = frozenset(plan_secrets(e.plan.args, e.plan.env, executors=executors))
    return {
        "plan": redact_plan(e.plan, e.sources, executors=executors),
        "sources": tuple(shown_source(s, secrets, executors=executors) for s in e.sources),
        "findings": shown_findings(e.findings, secrets),
        "memory": e.memory,
        "provenance": tuple(
            redact_provenance(p, secrets, executors=executors) for p in e.provenance
        ),
    }


def redact_plan(
    plan: LaunchPlan, sources: Iterable[Source] = (), *, executors: Executors = BUILTIN
) -> LaunchPlan:
    """The plan as it may be shown: the key, key variables and key flags hidden, in the
    plan's own argv and env and in its copy of the spec's run_args.

    A secret's value is hidden too wherever a caller copied it, whole or inside a longer
    value (`Hider`): in any variable, and in any flag that a layer above the engine set
    (`sources`: the plan's provenance; without it, every flag). The engine's own flags (its
    ``--host``, ``--port``, ``--model``) are derived from what is not secret and are left as
    they are, whatever a key happens to equal."""
    hide = Hider(plan_secrets(plan.args, plan.env, executors=executors))
    engine = frozenset(s.text for s in sources if s.what == "arg" and s.layer == ENGINE_LAYER)
    shown = msgspec.structs.replace(
        plan,
        spec=msgspec.structs.replace(
            plan.spec,
            run_args=tuple(
                hide.token(t) for t in redact_args(plan.spec.run_args, executors=executors)
            ),
        ),
        api_key=REDACTED if plan.api_key else "",
        env=tuple(hide.env(e) for e in plan.env),
        args=_hidden_above_engine(redact_args(plan.args, executors=executors), engine, hide),
    )
    return by_look(shown)


_T = TypeVar("_T")


def by_look(value: _T) -> _T:
    """`value` (a msgspec value) with every string that holds a secret by its own look (a
    key shape, a URL's credentials) hidden there, in any field: a key typed into the wrong
    option (``--executor``, ``--model``) is shown by no field of a printed plan."""
    raw = msgspec.to_builtins(value)
    hidden = _walk_strings(raw, Hider().value)
    return value if hidden == raw else msgspec.convert(hidden, type(value))


def _walk_strings(raw: object, hide: Callable[[str], str]) -> object:
    if isinstance(raw, str):
        return hide(raw)
    if isinstance(raw, dict):
        return {k: _walk_strings(v, hide) for k, v in raw.items()}
    if isinstance(raw, (list, tuple)):
        return type(raw)(_walk_strings(v, hide) for v in raw)
    return raw


def _hidden_above_engine(
    args: Sequence[str], engine: Collection[str], hide: Hider
) -> tuple[str, ...]:
    out = list(args)
    skip = -1
    for i, tok in enumerate(args):
        if i == skip or tok in engine:
            continue
        if i + 1 < len(args) and f"{tok} {args[i + 1]}" in engine:
            skip = i + 1
            continue
        out[i] = hide.token(tok)
    return tuple(out)
