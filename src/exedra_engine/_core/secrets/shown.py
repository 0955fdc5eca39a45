"""Argv, env and a layer's tokens as they may be shown: every secret the walk finds
(`walk`) hidden where it stands, and its value hidden wherever it was copied. Pure.

Over strings only: the typed views (a plan, its provenance, override files) stand beside
their types and come through here (`exedra_engine._core.plan.explained`,
`exedra_engine._core.plan.provenance`, `exedra_engine._core.config.overrides`), so one
table decides for all of them what is secret.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Final

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.secrets.hide import Hider, copied_secret
from exedra_engine._core.secrets.judge import is_secret_flag
from exedra_engine._core.secrets.table import REDACTED
from exedra_engine._core.secrets.walk import plan_secrets, secret_values, secret_values_shown

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


def said_tokens_shown(
    layer: str,
    what: str,
    tokens: tuple[str, ...],
    secrets: Collection[str],
    *,
    executors: Executors = BUILTIN,
) -> tuple[str, ...]:
    """One layer's contribution (`layer`, `what`: ``arg`` or ``env``, its `tokens`) with its
    secret hidden: a secret-named variable's value, a key flag's values, and (above the
    engine layer, whose flags are derived from what is not secret) any value that holds one
    of `secrets` or a secret by its look. From a contribution's parts: the walker stands
    below the planner that defines `Said` (`exedra_engine._core.plan.provenance`)."""
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
