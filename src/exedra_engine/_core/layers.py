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
- API keys accumulate as the executor reads them: every key flag's value (llama-server's
  ``--api-key``) moves into the profile's key variable (``LLAMA_API_KEY``), after the
  variable's own keys, so no key is ever visible in argv.
- The caller's key (`merge`'s `required_key`) is never dropped: a layer's key variable adds
  keys to it, and an empty one that would switch authentication off is an error naming the
  layer.
- Every token and variable must reach the executor as it is: a NUL character, a lone
  surrogate that no encoding can write, or an empty argument is an error naming the layer
  and the position. So is a key flag (``--api-key``...) for an executor that has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from exedra_engine._core.executors import BUILTIN, ExecutorProfile, Executors
from exedra_engine._core.flags import FlagTable, Item
from exedra_engine._core.struct import EMPTY, Value, frozen_fields
from exedra_engine.errors import PlanError


class Layer(Value, frozen=True, kw_only=True):
    """One contribution to a plan, `rank` higher wins."""

    name: str
    rank: int
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


class Source(Value, frozen=True, kw_only=True):
    """Where one final argv option or env variable came from, and what it replaced."""

    what: Literal["arg", "env"]
    text: str
    """The option's tokens joined by spaces, or ``NAME=VALUE``."""
    layer: str
    overrode: tuple[str, ...] = ()
    """``layer: text`` of every contribution it replaced."""


class Merged(Value, frozen=True, kw_only=True):
    """The merged argv and env (``NAME=VALUE``, sorted by name) with their sources."""

    args: tuple[str, ...]
    env: tuple[str, ...]
    sources: tuple[Source, ...]
    settings: dict[str, tuple[str, ...]] = EMPTY
    """The values of the non-repeatable known flags left in `args`, by canonical key."""

    def __post_init__(self) -> None:
        frozen_fields(self, "settings")


class _Env:
    """The env layers folded by name: each variable's winning value and layer, and what it
    replaced (only when explaining)."""

    def __init__(self, ordered: Sequence[Layer], explain: bool) -> None:
        self.val: dict[str, str] = {}
        self.layer: dict[str, Layer] = {}
        self.over: dict[str, list[str]] = {}
        for layer in ordered:
            for name, value in layer.env:
                if explain and name in self.layer:
                    self.over.setdefault(name, []).append(
                        f"{self.layer[name].name}: {name}={self.val[name]}"
                    )
                self.val[name], self.layer[name] = value, layer

    def drop(self, name: str) -> None:
        self.over.pop(name, None)
        del self.val[name], self.layer[name]


def merge(
    profile: ExecutorProfile,
    layers: Sequence[Layer],
    *,
    explain: bool = True,
    required_key: str = "",
    executors: Executors = BUILTIN,
) -> Merged:
    """Merge `layers` (in any order; ranks decide) for the executor of `profile`, raising
    `PlanError` for what cannot reach it (see the module's rules).

    With `explain` off the sources are not built (the planner's fast path). `required_key`
    is the caller's API key, which the merged env keeps in the profile's key variable
    whatever the layers say. `executors` are those whose key flags it refuses.
    """
    table = profile.flags
    ordered = sorted(layers, key=_rank)
    items: list[tuple[Layer, Item]] = []
    for layer in ordered:
        check_layer(profile, layer, executors)
        if layer.args:
            items.extend((layer, it) for it in table.split_items(layer.args, layer.name))
    env = _Env(ordered, explain)
    seen: dict[str, list[int]] = {}
    for i, (_, it) in enumerate(items):
        if it.key is not None:
            seen.setdefault(it.key, []).append(i)
    dropped, arg_over = _flag_or_variable(table, items, seen, env, explain)
    args = _Args(profile, items, seen=seen, dropped=dropped, arg_over=arg_over, explain=explain)
    if required_key and profile.key_env:
        _keep_key(profile, required_key, env)
    if args.keys:
        _move_keys(profile, args, env)
    names = sorted(env.val)
    if explain:
        args.sources.extend(
            Source(
                what="env",
                text=f"{name}={env.val[name]}",
                layer=env.layer[name].name,
                overrode=tuple(env.over.get(name, ())),
            )
            for name in names
        )
    return Merged(
        args=tuple(args.out),
        env=tuple(f"{n}={env.val[n]}" for n in names),
        sources=tuple(args.sources),
        settings=args.settings,
    )


def _flag_or_variable(
    table: FlagTable,
    items: Sequence[tuple[Layer, Item]],
    seen: dict[str, list[int]],
    env: _Env,
    explain: bool,
) -> tuple[set[str], dict[str, list[str]]]:
    """A flag and the variable the executor reads for it are one setting: the higher layer's
    form stays. Returns the flags whose variable won, and what each winning flag replaced."""
    dropped: set[str] = set()
    arg_over: dict[str, list[str]] = {}
    for key, where in seen.items():
        flag = table.flags[key]
        if flag.repeatable or not flag.env:
            continue
        names = [e for e in flag.env if e in env.layer]
        if not names:
            continue
        top = max(names, key=lambda e: env.layer[e].rank)
        if env.layer[top].rank > items[where[-1]][0].rank:
            dropped.add(key)
            if explain:
                env.over.setdefault(top, []).extend(_said(items[j]) for j in where)
            continue
        for e in names:
            if explain:
                arg_over.setdefault(key, []).append(f"{env.layer[e].name}: {e}={env.val[e]}")
            env.drop(e)
    return dropped, arg_over


class _Args:
    """The merged argv: each non-repeatable flag once, at its winner's place; key flags'
    values collected for the key variable."""

    def __init__(
        self,
        profile: ExecutorProfile,
        items: Sequence[tuple[Layer, Item]],
        *,
        seen: dict[str, list[int]],
        dropped: set[str],
        arg_over: dict[str, list[str]],
        explain: bool,
    ) -> None:
        self.out: list[str] = []
        self.settings: dict[str, tuple[str, ...]] = {}
        self.sources: list[Source] = []
        self.keys: list[str] = []
        self.key_layers: list[str] = []
        flags = profile.flags.flags
        moves_keys = bool(profile.key_env)
        for i, (layer, it) in enumerate(items):
            k = it.key
            overrode: tuple[str, ...] = ()
            if k is not None:
                if k == profile.key_flag and moves_keys:
                    self.keys.extend(_split_keys(profile, it.values[0]))
                    self.key_layers.append(layer.name)
                    continue
                if not flags[k].repeatable:
                    where = seen[k]
                    if where[-1] != i or k in dropped:
                        continue
                    self.settings[k] = it.values
                    if explain:
                        overrode = tuple(_said(items[j]) for j in where[:-1])
                        overrode += tuple(arg_over.get(k, ()))
            self.out.extend(it.tokens)
            if explain:
                self.sources.append(
                    Source(
                        what="arg", text=" ".join(it.tokens), layer=layer.name, overrode=overrode
                    )
                )


def _split_keys(profile: ExecutorProfile, value: str) -> list[str]:
    return [k for k in value.split(profile.key_separator) if k]


def _move_keys(profile: ExecutorProfile, args: _Args, env: _Env) -> None:
    # Every key flag's value joins the key variable, after the variable's own keys, so no key
    # is visible in the process's argv.
    name = profile.key_env
    prior = _split_keys(profile, env.val.get(name, ""))
    if name in env.layer:
        args.key_layers.insert(0, env.layer[name].name)
    env.val[name] = profile.key_separator.join(prior + args.keys)
    env.layer[name] = Layer(name=" + ".join(dict.fromkeys(args.key_layers)), rank=-1)


def _keep_key(profile: ExecutorProfile, key: str, env: _Env) -> None:
    # The caller's key travels in the lowest env layer (the engine's): a higher layer's value
    # would replace it. Keep it first, so that the plan's `api_key` is the caller's.
    name = profile.key_env
    top = env.layer.get(name)
    if top is None:
        return
    theirs = _split_keys(profile, env.val[name])
    if key in theirs:
        return
    if not theirs:
        raise PlanError(
            f"{top.name} sets {name} to nothing, which would switch off the API key "
            "the caller asked for; remove that variable, or plan without a key"
        )
    env.val[name] = profile.key_separator.join([key, *theirs])
    env.layer[name] = Layer(name=f"caller key + {top.name}", rank=top.rank)
    over = env.over.get(name, [])
    kept = next((o for o in over if o.endswith(f": {name}={key}")), None)
    if kept is not None:  # the caller's key was kept, not replaced
        over.remove(kept)


def check_layer(profile: ExecutorProfile, layer: Layer, executors: Executors = BUILTIN) -> None:
    """Raise `PlanError` for what cannot reach the executor as given (see the module's rules).
    Positions count from 1; the offending text itself is not shown (it may be a key)."""
    text = "".join(layer.args) + "".join(n + v for n, v in layer.env)
    if (
        text.isascii()
        and "\0" not in text
        and "" not in layer.args
        and not _foreign_key(layer.args, executors.foreign_key_flags(profile))
    ):
        return
    for i, tok in enumerate(layer.args, 1):
        what = unfit(tok) or ("is empty" if tok == "" else None)
        if what:
            raise PlanError(f"{layer.name} args: item {i} {what}")
        name = tok.partition("=")[0]
        if name in executors.foreign_key_flags(profile):
            raise PlanError(
                f"{layer.name} args: item {i} is {name}, but {profile.binary} has no API key "
                "option; put an authenticating proxy in front of it instead"
            )
    for i, (n, v) in enumerate(layer.env, 1):
        what = unfit(n) or unfit(v)
        if what:
            raise PlanError(
                f"{layer.name} env: entry {i} ({'name' if unfit(n) else 'value'}) {what}"
            )


def _foreign_key(args: Sequence[str], foreign: frozenset[str]) -> bool:
    return bool(foreign) and any(t.partition("=")[0] in foreign for t in args if t[:1] == "-")


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


def env_items(items: Sequence[str], where: str) -> tuple[tuple[str, str], ...]:
    """KEY=VALUE strings as pairs, raising `PlanError` for an item without a name or ``=``."""
    out: list[tuple[str, str]] = []
    for i, item in enumerate(items, 1):
        name, sep, value = item.partition("=")
        if not sep or not name:
            # The entry itself is not shown: a mistyped one may be a bare secret.
            raise PlanError(f"{where}: entry {i} is not KEY=VALUE")
        out.append((name, value))
    return tuple(out)
