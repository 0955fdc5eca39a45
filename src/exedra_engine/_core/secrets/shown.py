"""Plans, provenance, override files and argv as they may be shown: every secret the walk
finds (`walk`) hidden where it stands, and its value hidden wherever it was copied. Pure.

Plan rendering (text and ``--json``), ``--explain``, ``config`` and the values' reprs all
come through here, so one table decides for all of them what is secret.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Final, TypeVar

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.secrets.hide import Hider, copied_secret
from exedra_engine._core.secrets.judge import is_secret_flag
from exedra_engine._core.secrets.table import REDACTED
from exedra_engine._core.secrets.walk import plan_secrets, secret_values, secret_values_shown

if TYPE_CHECKING:
    from exedra_engine._core.plan.layers import Provenance, Said, Source
    from exedra_engine._core.values import Config, LaunchPlan, Override

ENGINE_LAYER: Final = "engine"
"""The layer of the flags the planner derives itself (`exedra_engine._core.plan.planner`)."""


def redact_env(item: str) -> str:
    """``NAME=VALUE`` with the value hidden when the name says it is a secret, and any part
    of it that is a secret by its look."""
    return Hider().env(item)


def redact_args(args: Sequence[str], *, executors: Executors = BUILTIN) -> tuple[str, ...]:
    """`args` with the value of every key flag hidden (``--api-key K``, ``--api-key=K``, a
    mistyped ``--api-kee K``)."""
    out = list(args)
    for i, _, inline in secret_values(args, executors):
        out[i] = f"{inline}={REDACTED}" if inline else REDACTED
    return tuple(out)


def redact_shown(
    args: Sequence[str],
    env: Iterable[str] = (),
    *,
    api_key: str = "",
    executors: Executors = BUILTIN,
    every_value: bool = False,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`args` and `env` as a repr may show them, without the `Executors` value a plan was
    made with: the value after any flag that is a secret flag of `executors` or whose name
    reads as a secret (``--sd-token``, a third executor's key flag), and of any secret-named
    variable, hidden; then every occurrence of those values and of `api_key`, in any token
    or variable. It hides more than `redact_args` (``--ssl-key-file``'s path too): a repr
    that shows too little costs a look at the plan, one that shows a key leaks it.

    With `every_value` (argv for an executor `executors` does not know, whose secret flags
    may read as anything), every value and every variable's value is hidden."""
    env = tuple(env)
    if every_value:
        return _every_value_hidden(args), tuple(f"{e.partition('=')[0]}={REDACTED}" for e in env)
    found = list(secret_values_shown(args, executors))
    secrets = {*plan_secrets(args, env, executors=executors), *(v for _, v, _ in found)}
    if api_key:
        secrets.update((api_key, *api_key.split(",")))
    out = list(args)
    for i, _, inline in found:
        out[i] = f"{inline}={REDACTED}" if inline else REDACTED
    hide = Hider(secrets)
    return tuple(hide.token(t) for t in out), tuple(hide.env(e) for e in env)


def _every_value_hidden(args: Sequence[str]) -> tuple[str, ...]:
    return tuple(
        (f"{t.partition('=')[0]}={REDACTED}" if "=" in t else t) if t[:1] == "-" else REDACTED
        for t in args
    )


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


def redact_provenance(
    p: Provenance, secrets: Collection[str], *, executors: Executors = BUILTIN
) -> Provenance:
    """One provenance entry (``plan --explain``) as it may be shown: secrets hidden where
    they stand, and a secret's value hidden in any variable and in any flag set above the
    engine layer (as in `redact_plan`), in the entry and in what it replaced."""
    return msgspec.structs.replace(
        p,
        said=redact_said(p.said, secrets, executors=executors),
        replaced=tuple(redact_said(r, secrets, executors=executors) for r in p.replaced),
    )


def redact_said(s: Said, secrets: Collection[str], *, executors: Executors = BUILTIN) -> Said:
    """One layer's contribution with its secret hidden: a secret-named variable's value, a
    key flag's values, and (above the engine layer, whose flags are derived from what is not
    secret) any value that holds one of `secrets` or a secret by its look."""
    shown = said_tokens_shown(s.layer, s.what, s.tokens, secrets, executors=executors)
    return s if shown == s.tokens else msgspec.structs.replace(s, tokens=shown)


def said_tokens_shown(
    layer: str,
    what: str,
    tokens: tuple[str, ...],
    secrets: Collection[str],
    *,
    executors: Executors = BUILTIN,
) -> tuple[str, ...]:
    """`redact_said`'s tokens, from a contribution's parts (no `Said` needed: the walker
    stands below the planner that defines it)."""
    hide = Hider(secrets)
    return _said_env(tokens, hide) if what == "env" else _said_arg(layer, tokens, hide, executors)


def _said_env(tokens: tuple[str, ...], hide: Hider) -> tuple[str, ...]:
    name, value = tokens
    shown = hide.env(f"{name}={value}").partition("=")[2]
    return tokens if shown == value else (name, shown)


def _said_arg(
    layer: str, tokens: tuple[str, ...], hide: Hider, executors: Executors
) -> tuple[str, ...]:
    above = layer != ENGINE_LAYER
    first, values = tokens[0], tokens[1:]
    if values:
        if is_secret_flag(first, executors):
            return (first, REDACTED)
        if above and copied_secret(" ".join(values), hide.secrets):
            return (first, REDACTED)
        return (first, *(hide.value(v) for v in values)) if above else tokens
    name, eq, value = first.partition("=")
    if first[:1] == "-" and eq and value and is_secret_flag(name, executors):
        return (f"{name}={REDACTED}",)
    return (hide.token(first),) if above else tokens


def redact_config(cfg: Config, *, executors: Executors = BUILTIN) -> Config:
    """Override files as they may be shown: secret variables and key flags hidden, and a
    key's value wherever the files copy it (after a mistyped ``--api-kee``, in another
    variable, inside a longer value), as `redact_plan` hides it in a plan. The key flags are
    those of `executors` (the ones the files were read with) and any flag whose name reads
    as a secret (``--sd-token``): an override file may name an executor the caller added."""
    hide = Hider(config_secrets(cfg, executors=executors))

    def env(m: dict[str, str]) -> dict[str, str]:
        return {n: hide.env(f"{n}={v}").partition("=")[2] for n, v in m.items()}

    def over(o: Override) -> Override:
        shown, _ = redact_shown(o.args, executors=executors)
        return msgspec.structs.replace(o, args=tuple(hide.token(t) for t in shown), env=env(o.env))

    return msgspec.structs.replace(
        cfg,
        env=env(cfg.env),
        engines={k: over(o) for k, o in cfg.engines.items()},
        models={k: over(o) for k, o in cfg.models.items()},
    )


def config_secrets(cfg: Config, *, executors: Executors = BUILTIN) -> frozenset[str]:
    """Every secret override files hold where it stands (as `redact_config` finds them):
    what text quoting the files (``config --check``'s findings) must not show."""
    overrides = [*cfg.engines.values(), *cfg.models.values()]
    secrets = {v for o in overrides for v in _override_secrets(o, cfg.env, executors)}
    secrets.update(plan_secrets((), [f"{n}={x}" for n, x in cfg.env.items()]))
    return frozenset(secrets)


def _override_secrets(o: Override, env: dict[str, str], executors: Executors) -> list[str]:
    variables = [f"{n}={x}" for n, x in (*env.items(), *o.env.items())]
    return [
        *plan_secrets(o.args, variables, executors=executors),
        *(v for _, v, _ in secret_values_shown(o.args, executors)),
    ]
