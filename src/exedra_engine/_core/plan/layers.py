"""Layering: merge argv and env layers into one argv and one env, recording who set what;
and join to a merge the flags the planner decides after it (`join_unset`: the memory plan's
context and prompt cache, which no layer set, join without a second merge).

Rules, per flag table (`exedra_engine._core.executors.flags`):

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
- Every other secret flag of the profile travels in the variable the executor reads for it
  (llama-server's ``--hf-token`` / ``-hft`` in ``HF_TOKEN``): the winning value moves there,
  so ``/proc/PID/cmdline`` of a launched executor never holds a secret.
- The caller's key (`merge`'s `required_key`) is never dropped: a layer's key variable adds
  keys to it, and an empty one that would switch authentication off is an error naming the
  layer.
- Every token and variable must reach the executor as it is: a NUL character, a lone
  surrogate that no encoding can write, or an empty argument is an error naming the layer
  and the position. So is a key flag (``--api-key``...) for an executor that has none.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from itertools import chain
from typing import NamedTuple

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import FlagTable, Item
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.plan.layer_checks import Layer, all_fit, check_layer, refuse_foreign_key
from exedra_engine._core.plan.layer_checks import unfit as unfit  # noqa: PLC0414 (planner reads it here)
from exedra_engine._core.plan.provenance import Provenance, Said, Source
from exedra_engine._core.struct import EMPTY, Value, freeze, frozen_fields
from exedra_engine.errors import PlanError


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
    env_map: dict[str, str] = EMPTY
    """`env` by name, for its readers."""
    read: tuple[Item, ...] = ()
    """Every layer's items in rank order, kept or not: what `replaced` is worked out from,
    only when provenance is asked for (``--explain``, an error's wording)."""
    read_layers: tuple[str, ...] = ()
    """The layer of each of `read`."""
    replaced_env: dict[str, tuple[Said, ...]] = EMPTY
    """What was replaced through the environment: by variable name, what each variable of
    `env` replaced; by flag key, the variables that a winning flag replaced."""

    @property
    def replaced(self) -> dict[str, tuple[Said, ...]]:
        """What each winning flag (by key) or variable (by name) replaced."""
        settings, extra, read = self.settings, self.replaced_env, self.read
        keys = [it.key for it in read]
        last = dict(zip(keys, range(len(keys))))  # noqa: B905 (of one length by construction)
        seen: dict[str, list[Said]] = {}
        for j, key in enumerate(keys):
            # Every occurrence of a winning flag but the last (the winner itself).
            if key in settings and last[key] != j:
                seen.setdefault(key, []).append(_said(self.read_layers[j], read[j]))
        out = {key: (*said, *extra.get(key, ())) for key, said in seen.items()}
        for key, more in extra.items():
            out.setdefault(key, more)
        return freeze(out)

    @property
    def provenance(self) -> tuple[Provenance, ...]:
        """Who set each item of `args`, then each variable of `env`."""
        over = self.replaced
        args = [
            Provenance(
                said=_said(layer, it),
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
        frozen_fields(self, "settings", "env_layers", "env_map", "replaced_env")


def _said(layer: str, it: Item) -> Said:
    return Said(layer=layer, what="arg", tokens=it.tokens, at=it.at)


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


class _Read(NamedTuple):
    """Every layer's items in rank order, as parallel lists."""

    items: list[Item]
    layers: list[Layer]
    """The layer of each item."""
    keys: list[str | None]
    """The key of each item."""
    last: dict[str | None, int]
    """Where each key last stands."""

    def said(self, key: str, upto: int) -> list[Said]:
        """Every occurrence of `key` before index `upto`, as data."""
        keys, items, layers = self.keys, self.items, self.layers
        return [_said(layers[j].name, items[j]) for j in range(upto) if keys[j] == key]


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
    Provenance is kept as data (`Merged.provenance`), worked out only when asked for; its
    text is made only for ``--explain`` (`Merged.sources`).
    """
    table = profile.flags  # (a property, looked up through a cache: once)
    ordered = sorted(layers, key=_rank)
    read = _read(profile, table, ordered, executors)
    env = _Env(ordered)
    dropped, arg_over = _flag_or_variable(table, read, env)
    key_flag = profile.key_flag if profile.key_env else None
    # (A frozenset's `intersection` walks its argument; `&` with a dict's keys walks both.)
    repeated = table.repeatable_keys.intersection(read.last)
    kept = _kept(read, repeated, dropped, key_flag)
    if required_key and profile.key_env:
        _keep_key(profile, required_key, env)
    if key_flag is not None and key_flag in read.last:
        _move_keys(profile, read, key_flag, env)
    moving: dict[str, str] = {}
    for k, name in _secret_envs(profile):
        if k in read.last:
            moving[k] = name
    if moving:
        kept = _move_secrets(read, kept, moving, env)
    return _merged(read, kept, repeated, env, arg_over)


@functools.cache
def _secret_envs(profile: ExecutorProfile) -> tuple[tuple[str, str], ...]:
    """(key, variable) of each secret flag (other than the key flag) that the executor also
    reads from a variable: a pure function of the frozen profile, worked out once, not with a
    table lookup per secret flag per merge."""
    table = profile.flags
    out: list[tuple[str, str]] = []
    for name in profile.secret_flags:
        hit = table.lookup(name)
        if hit is None or name == profile.key_flag:
            continue
        flag = hit[0]
        if flag.env and not flag.repeatable:
            out.append((flag.key, flag.env[0]))
    # One pair per key (two spellings of a flag share it), as a dict of them keeps it.
    return tuple(dict(out).items())


def _move_secrets(
    read: _Read, kept: list[int] | None, moving: dict[str, str], env: _Env
) -> list[int]:
    # The winning occurrence (the last, unless its variable won already) sets the variable;
    # none stays in argv.
    keep = []
    for j in range(len(read.items)) if kept is None else kept:
        key = read.keys[j]
        if key not in moving:
            keep.append(j)
        elif j == read.last[key] and read.items[j].values:
            name = moving[key]
            env.val[name] = read.items[j].values[0]
            env.layer[name] = read.layers[j]
    return keep


def _merged(
    read: _Read,
    kept: list[int] | None,
    repeated: frozenset[str],
    env: _Env,
    arg_over: dict[str, list[Said]],
) -> Merged:
    """The `Merged` of the items `kept` (None: all) and the folded env."""
    its = tuple(read.items)
    # (Comprehensions, not map(attrgetter): on these structs they are twice as fast.)
    read_layers = tuple([layer.name for layer in read.layers])
    if kept is None:
        items, item_layers = its, read_layers
    else:
        items = tuple([its[j] for j in kept])
        item_layers = tuple([read_layers[j] for j in kept])
    settings = {it.key: it.values for it in items if it.key is not None}
    for k in repeated:
        settings.pop(k, None)
    names = sorted(env.val)
    return Merged(
        args=tuple(chain.from_iterable([it.tokens for it in items])),
        env=tuple([f"{n}={env.val[n]}" for n in names]),
        settings=freeze(settings),
        items=items,
        item_layers=item_layers,
        env_layers=freeze({n: env.layer[n].name for n in names}),
        env_map=freeze(env.val),
        read=its,
        read_layers=read_layers,
        replaced_env=_replaced_env(arg_over, settings, env),
    )


def _replaced_env(
    arg_over: dict[str, list[Said]], settings: dict[str, tuple[str, ...]], env: _Env
) -> dict[str, tuple[Said, ...]]:
    """`Merged.replaced_env`: what the winning flags replaced of their variables, and what
    each variable left in the env replaced."""
    over = {k: tuple(v) for k, v in arg_over.items() if k in settings}
    for name, said in env.over.items():
        if said and name in env.val:
            over[name] = tuple(said)
    return freeze(over)


def _read(
    profile: ExecutorProfile, table: FlagTable, ordered: Sequence[Layer], executors: Executors
) -> _Read:
    """Every layer's items in rank order, each layer judged first (`check_layer`) unless all
    fit, the common case tested at once."""
    its: list[Item] = []
    lays: list[Layer] = []
    foreign = executors.foreign_key_flags(profile)
    fits = all_fit(ordered)  # else each layer is judged, in order, to name the culprit
    for layer in ordered:
        if not fits:
            check_layer(profile, layer)
        if layer.args:
            read = table.split_items(layer.args, layer.name)
            if foreign:
                refuse_foreign_key(profile, layer, read, foreign)
            its += read
            lays += [layer] * len(read)
    keys: list[str | None] = [it.key for it in its]
    last = dict(zip(keys, range(len(keys))))  # noqa: B905 (of one length by construction)
    last.pop(None, None)
    return _Read(its, lays, keys, last)


def _kept(
    read: _Read, repeated: frozenset[str], dropped: set[str], key_flag: str | None
) -> list[int] | None:
    """Which items stay, by index (None: all of them): tokens the table does not know, every
    occurrence of a repeatable flag, and the last of any other unless its variable won; key
    flags go to the key variable."""
    keys, last = read.keys, read.last
    unknown = keys.count(None)
    if len(last) + unknown == len(keys) and not dropped and key_flag not in last:
        return None  # every flag stands once: the common case without overrides
    win = dict(last)
    for k in dropped:
        del win[k]
    win.pop(key_flag, None)
    if not unknown and not repeated:
        return sorted(win.values())
    keep = set(win.values())
    return [
        j for j, k in enumerate(keys) if j in keep or k is None or (k in repeated and k != key_flag)
    ]


def _flag_or_variable(
    table: FlagTable, read: _Read, env: _Env
) -> tuple[set[str], dict[str, list[Said]]]:
    """A flag and the variable the executor reads for it are one setting: the higher layer's
    form stays. Returns the flags whose variable won, and what each winning flag replaced."""
    dropped: set[str] = set()
    arg_over: dict[str, list[Said]] = {}
    last = read.last
    # Only the flags whose variable some layer sets: far fewer than the flags in argv.
    for_env = table.flag_for_env
    both = {
        f.key
        for name in env.layer
        if (f := for_env(name)) is not None and f.key in last and not f.repeatable
    }
    if not both:
        return dropped, arg_over
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


def _split_keys(profile: ExecutorProfile, value: str) -> list[str]:
    return [k for k in value.split(profile.key_separator) if k]


def _move_keys(profile: ExecutorProfile, read: _Read, key_flag: str, env: _Env) -> None:
    # Every key flag's value joins the key variable, after the variable's own keys, so no key
    # is visible in the process's argv.
    keys: list[str] = []
    key_layers: list[str] = []
    for j, k in enumerate(read.keys):
        if k == key_flag:
            keys += _split_keys(profile, read.items[j].values[0])
            key_layers.append(read.layers[j].name)
    if not keys:  # only empty lists (``--api-key ,``): nothing to move
        return
    name = profile.key_env
    prior = _split_keys(profile, env.val.get(name, ""))
    if name in env.layer:
        key_layers.insert(0, env.layer[name].name)
    env.val[name] = profile.key_separator.join(prior + keys)
    env.layer[name] = Layer(name=" + ".join(dict.fromkeys(key_layers)), rank=-1)


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


def join_unset(
    m: Merged,
    table: FlagTable,
    tokens: Sequence[str],
    *,
    layer: str,
    at: int,
    lower: Collection[str],
) -> Merged:
    """`m` with `tokens` inserted at index `at` of layer `layer`'s args, as merging the layers
    again with them there would give, when no layer sets their flags nor the variables of
    those flags: there is nothing to fold, so the layers are not merged a second time (the
    memory plan's flags, `exedra_engine._core.memory.decide`). `lower` names the layers
    ranked below `layer`, whose items come first."""
    if not tokens:
        return m
    added = [msgspec.structs.replace(it, at=it.at + at) for it in table.split_items(tokens, layer)]
    shift = len(tokens)

    def joined(items: tuple[Item, ...], names: tuple[str, ...]) -> tuple[list[Item], list[str]]:
        out: list[Item] = []
        out_names: list[str] = []
        placed = False
        for item, name in zip(items, names, strict=True):
            moved = name == layer and item.at >= at  # after the insertion, in its layer
            if not placed and (moved or (name != layer and name not in lower)):
                out += added
                out_names += [layer] * len(added)
                placed = True
            out.append(msgspec.structs.replace(item, at=item.at + shift) if moved else item)
            out_names.append(name)
        if not placed:
            out += added
            out_names += [layer] * len(added)
        return out, out_names

    items, item_layers = joined(m.items, m.item_layers)
    read, read_layers = joined(m.read, m.read_layers)
    settings = {it.key: it.values for it in items if it.key is not None}
    for k in table.repeatable_keys.intersection(settings):
        del settings[k]
    return msgspec.structs.replace(
        m,
        args=tuple(chain.from_iterable([it.tokens for it in items])),
        settings=freeze(settings),
        items=tuple(items),
        item_layers=tuple(item_layers),
        read=tuple(read),
        read_layers=tuple(read_layers),
    )
