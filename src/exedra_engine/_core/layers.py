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
from itertools import chain, filterfalse
from operator import attrgetter
from typing import Literal, NamedTuple

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
    """Where one final argv option or env variable came from, and what it replaced, as
    ``plan --explain`` shows it (rendered from a `Provenance`)."""

    what: Literal["arg", "env"]
    text: str
    """The option's tokens joined by spaces, or ``NAME=VALUE``."""
    layer: str
    overrode: tuple[str, ...] = ()
    """``layer: text`` of every contribution it replaced."""
    key: str = ""
    """The flag's canonical key (``--ctx-size`` for ``-c 8``) or the variable's name; "" for
    a token the flag table does not know."""


class Said(Value, frozen=True, kw_only=True):
    """One contribution of a layer: an argv item or a variable."""

    layer: str
    what: Literal["arg", "env"]
    tokens: tuple[str, ...]
    """An item's tokens (``--ctx-size``, ``8192``), or a variable's (name, value)."""
    at: int = -1
    """Where the item's first token stands in its layer's args (-1 for a variable)."""

    @property
    def text(self) -> str:
        """As `Source.text` spells it."""
        return " ".join(self.tokens) if self.what == "arg" else "=".join(self.tokens)


class Provenance(Value, frozen=True, kw_only=True):
    """Provenance as data: which layer set one final argv item or variable, and what it
    replaced."""

    said: Said
    key: str | None = None
    """The flag's canonical key, or the variable's name; None for a token the table does not
    know."""
    replaced: tuple[Said, ...] = ()

    def source(self) -> Source:
        """The entry ``plan --explain`` shows."""
        s = self.said
        over = tuple(f"{r.layer}: {r.text}" for r in self.replaced)
        return Source(what=s.what, text=s.text, layer=s.layer, overrode=over, key=self.key or "")


class Merged(Value, frozen=True, kw_only=True):
    """The merged argv and env (``NAME=VALUE``, sorted by name) and, as data, who set what."""

    args: tuple[str, ...]
    env: tuple[str, ...]
    settings: dict[str, tuple[str, ...]] = EMPTY
    """The values of the non-repeatable known flags left in `args`, by canonical key."""
    items: tuple[Item, ...] = ()
    """`args` as the flag table reads it (each item's `Item.at` is in its layer's args)."""
    item_layers: tuple[str, ...] = ()
    """The layer that put each of `items` there."""
    env_layers: dict[str, str] = EMPTY
    """The layer that set each variable of `env`, by name."""
    replaced: dict[str, tuple[Said, ...]] = EMPTY
    """What each winning flag (by key) or variable (by name) replaced."""
    env_map: dict[str, str] = EMPTY
    """`env` by name, for its readers."""

    @property
    def provenance(self) -> tuple[Provenance, ...]:
        """Who set each item of `args`, then each variable of `env`."""
        over = self.replaced
        args = [
            Provenance(
                said=Said(layer=layer, what="arg", tokens=it.tokens, at=it.at),
                key=it.key,
                replaced=over.get(it.key, ()) if it.key is not None else (),
            )
            for layer, it in zip(self.item_layers, self.items, strict=True)
        ]
        env = [
            Provenance(
                said=Said(layer=self.env_layers[name], what="env", tokens=(name, value)),
                key=name,
                replaced=over.get(name, ()),
            )
            for name, _, value in (e.partition("=") for e in self.env)
        ]
        return (*args, *env)

    @property
    def sources(self) -> tuple[Source, ...]:
        """`provenance` as ``plan --explain`` shows it."""
        return tuple(o.source() for o in self.provenance)

    def __post_init__(self) -> None:
        frozen_fields(self, "settings", "env_layers", "replaced", "env_map")


def _said(layer: Layer, it: Item) -> Said:
    return Said(layer=layer.name, what="arg", tokens=it.tokens, at=it.at)


class _Env:
    """The env layers folded by name: each variable's winning value and layer, and what it
    replaced."""

    def __init__(self, ordered: Sequence[Layer]) -> None:
        self.val: dict[str, str] = {}
        self.layer: dict[str, Layer] = {}
        self.over: dict[str, list[Said]] = {}
        for layer in ordered:
            for name, value in layer.env:
                if name in self.layer:
                    self.over.setdefault(name, []).append(
                        Said(layer=self.layer[name].name, what="env", tokens=(name, self.val[name]))
                    )
                self.val[name], self.layer[name] = value, layer

    def drop(self, name: str) -> None:
        self.over.pop(name, None)
        del self.val[name], self.layer[name]


def merge(
    profile: ExecutorProfile,
    layers: Sequence[Layer],
    *,
    required_key: str = "",
    executors: Executors = BUILTIN,
) -> Merged:
    """Merge `layers` (in any order; ranks decide) for the executor of `profile`, raising
    `PlanError` for what cannot reach it (see the module's rules).

    `required_key` is the caller's API key, which the merged env keeps in the profile's key
    variable whatever the layers say. `executors` are those whose key flags it refuses.
    Provenance is kept as data (`Merged.provenance`); its text is made only for
    ``--explain`` (`Merged.sources`).
    """
    table = profile.flags
    ordered = sorted(layers, key=_rank)
    # Every layer's items in rank order, and beside each the layer it came from.
    its: list[Item] = []
    lays: list[Layer] = []
    foreign = executors.foreign_key_flags(profile)
    fits = _all_fit(ordered)  # else each layer is judged, in order, to name the culprit
    for layer in ordered:
        if not fits:
            check_layer(profile, layer)
        if layer.args:
            read = table.split_items(layer.args, layer.name)
            if foreign:
                _refuse_foreign_key(profile, layer, read, foreign)
            its += read
            lays += [layer] * len(read)
    env = _Env(ordered)
    # Where each flag last stands (the winner of a non-repeatable one), and which flags
    # stand more than once (the only ones that replace anything).
    # (In C, by map and zip: a plan's merge is a hot path; see bench row 2.)
    keys: list[str | None] = list(map(_KEY, its))
    n = len(keys)
    last = dict(zip(keys, range(n), strict=True))
    last.pop(None, None)
    again: set[str] = set()
    first = last
    if len(last) + keys.count(None) != n:  # some flag stands twice: it replaces something
        first = dict(zip(reversed(keys), range(n - 1, -1, -1), strict=True))
        again = {k for k, i in last.items() if k is not None and first[k] != i}
    read_ = _Read(its, lays, keys, last, first)
    dropped, arg_over = _flag_or_variable(table, read_, env)
    args = _Args(profile, read_, again=again, dropped=dropped, arg_over=arg_over)
    if required_key and profile.key_env:
        _keep_key(profile, required_key, env)
    if args.keys:
        _move_keys(profile, args, env)
    names = sorted(env.val)
    replaced = args.over
    for name, over in env.over.items():
        if over and name in env.val:
            replaced[name] = tuple(over)
    return Merged(
        args=tuple(args.out),
        env=tuple(f"{n}={env.val[n]}" for n in names),
        settings=args.settings,
        items=args.items,
        item_layers=args.item_layers,
        env_layers={n: env.layer[n].name for n in names},
        env_map=env.val,
        replaced=replaced,
    )


class _Read(NamedTuple):
    """Every layer's items in rank order, as parallel lists."""

    items: list[Item]
    layers: list[Layer]
    """The layer of each item."""
    keys: list[str | None]
    """The key of each item."""
    last: dict[str | None, int]
    """Where each key last stands."""
    first: dict[str | None, int]
    """Where each key first stands."""

    def said(self, key: str, upto: int) -> list[Said]:
        """Every occurrence of `key` before index `upto`, as data."""
        keys, items, layers = self.keys, self.items, self.layers
        return [_said(layers[j], items[j]) for j in range(upto) if keys[j] == key]


def _flag_or_variable(
    table: FlagTable, read: _Read, env: _Env
) -> tuple[set[str], dict[str, list[Said]]]:
    """A flag and the variable the executor reads for it are one setting: the higher layer's
    form stays. Returns the flags whose variable won, and what each winning flag replaced."""
    dropped: set[str] = set()
    arg_over: dict[str, list[Said]] = {}
    last = read.last
    # Only the flags whose variable some layer sets: far fewer than the flags in argv.
    both = {
        f.key
        for name in env.layer
        if (f := table.flag_for_env(name)) is not None and f.key in last and not f.repeatable
    }
    for key in sorted(both, key=last.__getitem__):
        flag = table.flags[key]
        names = [e for e in flag.env if e in env.layer]
        top = max(names, key=lambda e: env.layer[e].rank)
        if env.layer[top].rank > read.layers[last[key]].rank:
            dropped.add(key)
            env.over.setdefault(top, []).extend(read.said(key, last[key] + 1))
            continue
        for e in names:
            arg_over.setdefault(key, []).append(
                Said(layer=env.layer[e].name, what="env", tokens=(e, env.val[e]))
            )
            env.drop(e)
    return dropped, arg_over


class _Args:
    """The merged argv: each non-repeatable flag once, at its winner's place; key flags'
    values collected for the key variable."""

    def __init__(
        self,
        profile: ExecutorProfile,
        read: _Read,
        *,
        again: set[str],
        dropped: set[str],
        arg_over: dict[str, list[Said]],
    ) -> None:
        self.over: dict[str, tuple[Said, ...]] = {}
        self.keys: list[str] = []
        self.key_layers: list[str] = []
        its, keys, last = read.items, read.keys, read.last
        repeatable = profile.flags.repeatable_keys
        key_flag = profile.key_flag if profile.key_env else None
        if key_flag in last:
            for j, k in enumerate(keys):
                if k == key_flag:
                    self.keys += _split_keys(profile, its[j].values[0])
                    self.key_layers.append(read.layers[j].name)
        # Kept: tokens the table does not know, every occurrence of a repeatable flag, and
        # the last of any other unless its variable won; key flags go to the key variable.
        gone = {
            j for k in again - repeatable for j in range(read.first[k], last[k]) if keys[j] == k
        }
        gone.update(last[k] for k in dropped)
        if key_flag in last:
            gone.update(j for j, k in enumerate(keys) if k == key_flag)
        kept = list(filterfalse(gone.__contains__, range(len(keys))))
        self.items = items = tuple(map(its.__getitem__, kept))
        self.item_layers = tuple(map(_NAME, map(read.layers.__getitem__, kept)))
        self.out = list(chain.from_iterable(map(_TOKENS, items)))
        settings = dict(zip(map(_KEY, items), map(_VALUES, items), strict=True))
        settings.pop(None, None)
        for k in repeatable & settings.keys():
            del settings[k]
        self.settings: dict[str, tuple[str, ...]] = settings
        for k in again | arg_over.keys():
            if k in self.settings:
                self.over[k] = (*read.said(k, last[k]), *arg_over.get(k, ()))


_KEY = attrgetter("key")
_VALUES = attrgetter("values")
_TOKENS = attrgetter("tokens")
_NAME = attrgetter("name")
_ARGS = attrgetter("args")
_ENV = attrgetter("env")


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
    kept = next((o for o in over if o.tokens == (name, key)), None)
    if kept is not None:  # the caller's key was kept, not replaced
        over.remove(kept)


def check_layer(profile: ExecutorProfile, layer: Layer) -> None:
    """Raise `PlanError` for what cannot reach the executor as given (see the module's rules).
    Positions count from 1; the offending text itself is not shown (it may be a key)."""
    if _fits(layer):
        return
    for i, tok in enumerate(layer.args, 1):
        what = unfit(tok) or ("is empty" if tok == "" else None)
        if what:
            raise PlanError(f"{layer.name} args: item {i} {what}")
    for i, (n, v) in enumerate(layer.env, 1):
        what = unfit(n) or unfit(v)
        if what:
            raise PlanError(
                f"{layer.name} env: entry {i} ({'name' if unfit(n) else 'value'}) {what}"
            )


def _all_fit(layers: Sequence[Layer]) -> bool:
    # `_fits` for every layer at once: one string to test, the common case.
    args = "".join(map("".join, map(_ARGS, layers)))
    env = "".join(map("".join, chain.from_iterable(map(_ENV, layers))))
    return (
        args.isascii()
        and env.isascii()
        and "\0" not in args
        and "\0" not in env
        and "" not in chain.from_iterable(map(_ARGS, layers))
    )


def _fits(layer: Layer) -> bool:
    # The common case, cheaply: every token and variable ASCII, without NUL, not empty.
    args = layer.args
    if args:
        text = "".join(args)
        if not text.isascii() or "\0" in text or "" in args:
            return False
    for n, v in layer.env:
        if not (n.isascii() and v.isascii()) or "\0" in n or "\0" in v:
            return False
    return True


def _refuse_foreign_key(
    profile: ExecutorProfile, layer: Layer, items: Sequence[Item], foreign: frozenset[str]
) -> None:
    """A key flag of another executor (``--api-key`` for whisper-server), which this one's
    table does not know, so the reader leaves it a token of its own."""
    for it in items:
        if it.key is None and it.name in foreign:
            raise PlanError(
                f"{layer.name} args: item {it.at + 1} is {it.name}, but {profile.binary} has "
                "no API key option; put an authenticating proxy in front of it instead"
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
