"""The one base of every value the library passes around.

Frozen (a changed copy is `msgspec.structs.replace`), keyword-only, and strict when decoded:
an edited plan JSON with a misspelt field is an error naming it, not a field silently dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn, TypeVar, cast

import msgspec

_K = TypeVar("_K")
_V = TypeVar("_V")


class Value(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of the library's immutable values.

    What a value shows of itself, to ``repr`` where it overrides it and always to rich
    (``__rich_repr__``, which msgspec would otherwise answer with every raw field), is
    `shown_fields`: a value that holds secrets hides them there, once, for both."""

    def shown_fields(self) -> dict[str, Any]:
        """The fields as a repr may show them (all of them, unless a value holds secrets)."""
        return {f: getattr(self, f) for f in self.__struct_fields__}

    def shown_repr(self) -> str:
        """``Name(field=value, ...)`` of `shown_fields`."""
        shown = ", ".join(f"{k}={v!r}" for k, v in self.shown_fields().items())
        return f"{type(self).__name__}({shown})"

    def __rich_repr__(self) -> list[tuple[str, Any]]:
        return list(self.shown_fields().items())


class FrozenDict(dict[_K, _V]):
    """A dict that cannot change, and so can be hashed: the mapping fields of values.

    A `dict` still (msgspec encodes it, ``isinstance(x, dict)`` holds, the API's ``dict``
    fields keep their type), but every mutator raises `TypeError`: a frozen value stays frozen
    through its mappings, and a value holding one can be a cache key. A value converts its
    mapping fields in ``__post_init__`` with `frozen_fields`, so decoding and construction
    both give one.
    """

    # No __init__: dict's own, in C, keeps building one as cheap as copying a dict (a plan
    # builds one per merge). The hash is computed on first use.
    __slots__ = ("_hash",)
    _hash: int

    def __hash__(self) -> int:  # type: ignore[override]
        try:
            return self._hash
        except AttributeError:
            self._hash = hash(frozenset(self.items()))
            return self._hash

    def __reduce__(self) -> tuple[type[FrozenDict[_K, _V]], tuple[dict[_K, _V]]]:
        # pickle and copy would otherwise rebuild it item by item, through __setitem__.
        return (type(self), (dict(self),))

    def __copy__(self) -> FrozenDict[_K, _V]:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> FrozenDict[_K, _V]:
        return self

    def _immutable(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"{type(self).__name__} is immutable; build a new one")

    __setitem__ = _immutable
    __delitem__ = _immutable
    __ior__ = _immutable
    clear = _immutable
    pop = _immutable
    popitem = _immutable
    setdefault = _immutable
    update = _immutable


EMPTY: FrozenDict[Any, Any] = FrozenDict()
"""The one empty `FrozenDict`, and the default of every mapping field: msgspec's
``omit_defaults`` recognizes a default by identity unless it is a plain empty ``dict`` (or
list, set, ...) made by its ``default_factory``, so a field is left out of the JSON only while
it holds this very object. `freeze` gives it for every empty mapping."""


def freeze(value: Mapping[_K, _V]) -> FrozenDict[_K, _V]:
    """`value` as a `FrozenDict` (itself when it is one; `EMPTY` when it is empty)."""
    if not value:
        return cast("FrozenDict[_K, _V]", EMPTY)
    return value if isinstance(value, FrozenDict) else FrozenDict(value)


def frozen_fields(value: msgspec.Struct, *names: str) -> None:
    """Replace the named mapping fields of a frozen `value` by `FrozenDict`s (see `freeze`):
    call it from ``__post_init__``, which runs on construction and on decoding alike. The
    fields default to `EMPTY`, so that an empty one stays out of the JSON as before."""
    for name in names:
        current = getattr(value, name)
        if type(current) is FrozenDict and (current or current is EMPTY):
            continue  # frozen already, the common case of a value built from values
        frozen = freeze(current)
        if frozen is not current:
            msgspec.structs.force_setattr(value, name, frozen)
