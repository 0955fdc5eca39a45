"""A layer (`Layer`), and what every layer must be before it is merged: tokens and variables a
process can be given (no NUL, no lone surrogate, no empty argument), and no key flag of another
executor. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.struct import Value
from exedra_engine.errors import PlanError


class Layer(Value, frozen=True, kw_only=True):
    """One contribution to a plan, `rank` higher wins."""

    name: str
    rank: int
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


def check_layer(profile: ExecutorProfile, layer: Layer) -> None:
    """Raise `PlanError` for what cannot reach the executor as given (see the module's rules).
    Positions count from 1; the offending text itself is not shown (it may be a key)."""
    if all_fit((layer,)):
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


def all_fit(layers: Sequence[Layer]) -> bool:
    # The common case, cheaply, for every layer at once (one string to test): every token
    # and variable ASCII, without NUL, no argument empty.
    args = tuple(chain.from_iterable([layer.args for layer in layers]))
    env = tuple(chain.from_iterable(chain.from_iterable([layer.env for layer in layers])))
    text = "".join(args + env)
    return text.isascii() and "\0" not in text and "" not in args


def refuse_foreign_key(
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
