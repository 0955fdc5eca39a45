"""Layering: merge argv and env layers into one argv and one env, recording who set what.

Rules, per flag table (`exedra_engine._core.flags`):

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
- The caller's key (`merge`'s `required_key`) is never dropped: a layer's ``LLAMA_API_KEY``
  adds keys to it, and an empty ``LLAMA_API_KEY`` that would switch authentication off is an
  error naming the layer.
- Every token and variable must reach the executor as it is: a NUL character, a lone
  surrogate that no encoding can write, or an empty argument is an error naming the layer
  and the position. So is a key flag (``--api-key``...) for an executor that has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

import msgspec
from returns.result import Failure, Result, Success

from exedra_engine._core.flags import FlagTable, Item
from exedra_engine._core.redact import KEY_FLAGS
from exedra_engine.errors import PlanError

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
    settings: dict[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    """The values of the non-repeatable known flags left in `args`, by canonical key."""


def merge_layers(
    table: FlagTable, layers: Sequence[Layer], *, explain: bool = True, required_key: str = ""
) -> Result[Merged, PlanError]:
    """Merge `layers` (in any order; ranks decide) for the executor of `table`.

    With `explain` off the sources are not built (the planner's fast path). `required_key`
    is the caller's API key, which the merged env keeps in ``LLAMA_API_KEY`` whatever the
    layers say (see the module's rules).
    """
    try:
        return Success(merge(table, layers, explain=explain, required_key=required_key))
    except PlanError as e:
        return Failure(e)


def merge(
    table: FlagTable, layers: Sequence[Layer], *, explain: bool = True, required_key: str = ""
) -> Merged:
    """`merge_layers`, raising the `PlanError` instead of returning it."""
    ordered = sorted(layers, key=_rank)
    args: list[tuple[Layer, Item]] = []
    for layer in ordered:
        check_layer(table, layer)
        if layer.args:
            args.extend((layer, it) for it in table.split_items(layer.args, layer.name))

    env_val: dict[str, str] = {}
    env_layer: dict[str, Layer] = {}
    env_over: dict[str, list[str]] = {}
    for layer in ordered:
        for name, value in layer.env:
            if explain and name in env_layer:
                env_over.setdefault(name, []).append(
                    f"{env_layer[name].name}: {name}={env_val[name]}"
                )
            env_val[name], env_layer[name] = value, layer

    flags = table.flags
    seen: dict[str, list[int]] = {}
    for i, (_, it) in enumerate(args):
        if it.key is not None:
            seen.setdefault(it.key, []).append(i)
    dropped: set[str] = set()
    arg_over: dict[str, list[str]] = {}
    for key, where in seen.items():
        flag = flags[key]
        if flag.repeatable or not flag.env:
            continue
        names = [e for e in flag.env if e in env_layer]
        if not names:
            continue
        top = max(names, key=lambda e: env_layer[e].rank)
        if env_layer[top].rank > args[where[-1]][0].rank:
            dropped.add(key)
            if explain:
                env_over.setdefault(top, []).extend(_said(args[j]) for j in where)
        else:
            for e in names:
                if explain:
                    arg_over.setdefault(key, []).append(f"{env_layer[e].name}: {e}={env_val[e]}")
                env_over.pop(e, None)
                del env_val[e], env_layer[e]

    out_args: list[str] = []
    settings: dict[str, tuple[str, ...]] = {}
    sources: list[Source] = []
    keys: list[str] = []
    key_layers: list[str] = []
    moves_keys = table.reads_api_key_env
    for i, (layer, it) in enumerate(args):
        k = it.key
        overrode: tuple[str, ...] = ()
        if k is not None:
            if k == API_KEY_FLAG and moves_keys:
                keys.extend(v for v in it.values[0].split(",") if v)
                key_layers.append(layer.name)
                continue
            if not flags[k].repeatable:
                where = seen[k]
                if where[-1] != i or k in dropped:
                    continue
                settings[k] = it.values
                if explain:
                    overrode = tuple(_said(args[j]) for j in where[:-1]) + tuple(
                        arg_over.get(k, ())
                    )
        out_args.extend(it.tokens)
        if explain:
            sources.append(
                Source(what="arg", text=" ".join(it.tokens), layer=layer.name, overrode=overrode)
            )

    if required_key and moves_keys:
        _keep_key(required_key, env_val, env_layer, env_over)

    if keys:
        prior = [k for k in env_val.get(API_KEY_ENV, "").split(",") if k]
        if API_KEY_ENV in env_layer:
            key_layers.insert(0, env_layer[API_KEY_ENV].name)
        env_val[API_KEY_ENV] = ",".join(prior + keys)
        env_layer[API_KEY_ENV] = Layer(name=" + ".join(dict.fromkeys(key_layers)), rank=-1)

    names = sorted(env_val)
    if explain:
        sources.extend(
            Source(
                what="env",
                text=f"{name}={env_val[name]}",
                layer=env_layer[name].name,
                overrode=tuple(env_over.get(name, ())),
            )
            for name in names
        )
    return Merged(
        args=tuple(out_args),
        env=tuple(f"{n}={env_val[n]}" for n in names),
        sources=tuple(sources),
        settings=settings,
    )


def _keep_key(
    key: str, env_val: dict[str, str], env_layer: dict[str, Layer], env_over: dict[str, list[str]]
) -> None:
    # The caller's key travels in the lowest env layer (the engine's): a higher layer's value
    # would replace it. Keep it first, so that the plan's `api_key` is the caller's.
    top = env_layer.get(API_KEY_ENV)
    if top is None:
        return
    theirs = [k for k in env_val[API_KEY_ENV].split(",") if k]
    if key in theirs:
        return
    if not theirs:
        raise PlanError(
            f"{top.name} sets {API_KEY_ENV} to nothing, which would switch off the API key "
            "the caller asked for; remove that variable, or plan without a key"
        )
    env_val[API_KEY_ENV] = ",".join([key, *theirs])
    env_layer[API_KEY_ENV] = Layer(name=f"caller key + {top.name}", rank=top.rank)
    over = env_over.get(API_KEY_ENV, [])
    kept = next((o for o in over if o.endswith(f": {API_KEY_ENV}={key}")), None)
    if kept is not None:  # the caller's key was kept, not replaced
        over.remove(kept)


def check_layer(table: FlagTable, layer: Layer) -> None:
    """Raise `PlanError` for what cannot reach the executor as given (see the module's rules).
    Positions count from 1; the offending text itself is not shown (it may be a key)."""
    text = "".join(layer.args) + "".join(n + v for n, v in layer.env)
    if text.isascii() and "\0" not in text and "" not in layer.args and not _keyish(layer.args):
        return
    for i, tok in enumerate(layer.args, 1):
        what = unfit(tok) or ("is empty" if tok == "" else None)
        if what:
            raise PlanError(f"{layer.name} args: item {i} {what}")
        name = tok.partition("=")[0]
        if name in KEY_FLAGS and table.lookup(name) is None:
            raise PlanError(
                f"{layer.name} args: item {i} is {name}, but {table.binary} has no API key "
                "option; put an authenticating proxy in front of it instead"
            )
    for i, (n, v) in enumerate(layer.env, 1):
        what = unfit(n) or unfit(v)
        if what:
            raise PlanError(
                f"{layer.name} env: entry {i} ({'name' if unfit(n) else 'value'}) {what}"
            )


def _keyish(args: Sequence[str]) -> bool:
    return any(t[:2] == "--" and t.partition("=")[0] in KEY_FLAGS for t in args) or any(
        t in KEY_FLAGS for t in args
    )


def unfit(text: str) -> str | None:
    """Why `text` cannot be an argument or variable of a process, or None."""
    if "\0" in text:
        return "contains a NUL character"
    try:
        # What open_process does: os.fsencode, surrogateescape for undecodable bytes.
        text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return "contains a lone surrogate, which no encoding can write"
    return None


def _rank(layer: Layer) -> int:
    return layer.rank


def _said(entry: tuple[Layer, Item]) -> str:
    return f"{entry[0].name}: {' '.join(entry[1].tokens)}"


def parse_env(items: Sequence[str], where: str) -> Result[tuple[tuple[str, str], ...], PlanError]:
    """KEY=VALUE strings as pairs; an item without a name or ``=`` is an error naming it."""
    try:
        return Success(env_items(items, where))
    except PlanError as e:
        return Failure(e)


def env_items(items: Sequence[str], where: str) -> tuple[tuple[str, str], ...]:
    """`parse_env`, raising the `PlanError` instead of returning it."""
    out: list[tuple[str, str]] = []
    for i, item in enumerate(items, 1):
        name, sep, value = item.partition("=")
        if not sep or not name:
            # The entry itself is not shown: a mistyped one may be a bare secret.
            raise PlanError(f"{where}: entry {i} is not KEY=VALUE")
        out.append((name, value))
    return tuple(out)
