"""Layering: merge argv and env layers into one argv and one env, recording who set what.

Rules, per flag table (`exedra_engine.flags`):

- A flag set by several layers appears once, with the highest layer's value, at the place
  that layer put it; spellings and ``--flag=value`` forms count as the same flag, and a
  negation (``--no-webui``) is the same setting as its positive form.
- Repeatable flags (``--lora``, ``--override-kv``, ...) accumulate, lowest layer first.
- Tokens the table does not know pass through untouched, in order.
- An environment variable takes the highest layer's value.
- A flag and the variable the executor reads for it (``--ctx-size`` / ``LLAMA_ARG_CTX_SIZE``)
  are one setting: the higher layer's form stays and the other is dropped; on a tie the
  flag stays, as the executor itself prefers it.
- API keys accumulate like llama-server's: every ``--api-key`` value moves into
  ``LLAMA_API_KEY`` (after the variable's own keys), so no key is ever visible in argv.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Literal

import msgspec
from returns.result import Failure, Result, Success

from exedra_engine.errors import PlanError
from exedra_engine.flags import FlagTable, Item

API_KEY_FLAG: Final = "--api-key"
API_KEY_ENV: Final = "LLAMA_API_KEY"


class Layer(msgspec.Struct, frozen=True, kw_only=True):
    """One contribution to a plan, `rank` higher wins."""

    name: str
    rank: int
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


class Source(msgspec.Struct, frozen=True, kw_only=True):
    """Where one final argv option or env variable came from, and what it replaced."""

    what: Literal["arg", "env"]
    text: str
    """The option's tokens joined by spaces, or ``NAME=VALUE``."""
    layer: str
    overrode: tuple[str, ...] = ()
    """``layer: text`` of every contribution it replaced."""


class Merged(msgspec.Struct, frozen=True, kw_only=True):
    """The merged argv and env (``NAME=VALUE``, sorted by name) with their sources."""

    args: tuple[str, ...]
    env: tuple[str, ...]
    sources: tuple[Source, ...]


class _Arg(msgspec.Struct, frozen=True):
    layer: Layer
    item: Item


def merge_layers(table: FlagTable, layers: Sequence[Layer]) -> Result[Merged, PlanError]:
    """Merge `layers` (in any order; ranks decide) for the executor of `table`."""
    ordered = sorted(layers, key=lambda lay: lay.rank)
    args: list[_Arg] = []
    for layer in ordered:
        split = table.split(layer.args, layer.name)
        if isinstance(split, Failure):
            return split
        args.extend(_Arg(layer, it) for it in split.unwrap())

    env_val: dict[str, str] = {}
    env_layer: dict[str, Layer] = {}
    env_over: dict[str, list[str]] = {}
    for layer in ordered:
        for name, value in layer.env:
            if name in env_layer:
                env_over.setdefault(name, []).append(
                    f"{env_layer[name].name}: {name}={env_val[name]}"
                )
            env_val[name], env_layer[name] = value, layer

    winner: dict[str, int] = {}
    for i, a in enumerate(args):
        if a.item.key is not None:
            winner[a.item.key] = i
    dropped: set[str] = set()
    arg_over: dict[str, list[str]] = {}
    for key, i in winner.items():
        flag = table.flags[key]
        if flag.repeatable:
            continue
        names = [e for e in flag.env if e in env_layer]
        if not names:
            continue
        top = max(names, key=lambda e: env_layer[e].rank)
        if env_layer[top].rank > args[i].layer.rank:
            dropped.add(key)
            env_over.setdefault(top, []).extend(
                f"{a.layer.name}: {' '.join(a.item.tokens)}" for a in args if a.item.key == key
            )
        else:
            for e in names:
                arg_over.setdefault(key, []).append(f"{env_layer[e].name}: {e}={env_val[e]}")
                env_over.pop(e, None)
                env_val.pop(e)
                env_layer.pop(e)

    out_args: list[str] = []
    sources: list[Source] = []
    keys: list[str] = []
    key_layers: list[str] = []
    for i, a in enumerate(args):
        k = a.item.key
        if k == API_KEY_FLAG and API_KEY_ENV in table.env_names:
            keys.extend(v for v in a.item.values[0].split(",") if v)
            key_layers.append(a.layer.name)
            continue
        if k is not None and not table.flags[k].repeatable and (winner[k] != i or k in dropped):
            continue
        overrode: tuple[str, ...] = ()
        if k is not None and not table.flags[k].repeatable:
            overrode = tuple(
                f"{b.layer.name}: {' '.join(b.item.tokens)}" for b in args[:i] if b.item.key == k
            ) + tuple(arg_over.get(k, ()))
        out_args.extend(a.item.tokens)
        sources.append(
            Source(what="arg", text=" ".join(a.item.tokens), layer=a.layer.name, overrode=overrode)
        )

    if keys:
        prior = [k for k in env_val.get(API_KEY_ENV, "").split(",") if k]
        if API_KEY_ENV in env_layer:
            key_layers.insert(0, env_layer[API_KEY_ENV].name)
        env_val[API_KEY_ENV] = ",".join(prior + keys)
        env_layer[API_KEY_ENV] = Layer(name=" + ".join(dict.fromkeys(key_layers)), rank=-1)

    for name in sorted(env_val):
        sources.append(
            Source(
                what="env",
                text=f"{name}={env_val[name]}",
                layer=env_layer[name].name,
                overrode=tuple(env_over.get(name, ())),
            )
        )
    return Success(
        Merged(
            args=tuple(out_args),
            env=tuple(f"{n}={env_val[n]}" for n in sorted(env_val)),
            sources=tuple(sources),
        )
    )


def parse_env(items: Sequence[str], where: str) -> Result[tuple[tuple[str, str], ...], PlanError]:
    """KEY=VALUE strings as pairs; an item without a name or ``=`` is an error naming it."""
    out: list[tuple[str, str]] = []
    for i, item in enumerate(items, 1):
        name, sep, value = item.partition("=")
        if not sep or not name:
            # The entry itself is not shown: a mistyped one may be a bare secret.
            return Failure(PlanError(f"{where}: entry {i} is not KEY=VALUE"))
        out.append((name, value))
    return Success(tuple(out))


def env_pairs(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A mapping as pairs, in its own order."""
    return tuple(env.items())
