"""`FrozenDict`: the mapping fields of values cannot change and can be hashed (issue 20 item 4)."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable

import msgspec
import pytest

from exedra_engine._core.struct import FrozenDict, Value, freeze, frozen_fields


class _Holder(Value, frozen=True, kw_only=True):
    env: dict[str, str] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        frozen_fields(self, "env")


def test_every_mutator_raises_and_the_content_stays() -> None:
    d: FrozenDict[str, str] = FrozenDict({"A": "1"})
    mutations: list[Callable[[], object]] = [
        lambda: d.__setitem__("A", "2"),
        lambda: d.__delitem__("A"),
        lambda: d.update(A="2"),
        lambda: d.pop("A"),
        d.popitem,
        d.clear,
        lambda: d.setdefault("B", "3"),
        lambda: d.__ior__({"A": "2"}),
    ]
    for mutate in mutations:
        with pytest.raises(TypeError, match="immutable"):
            mutate()
    assert d == {"A": "1"}


def test_equal_content_hashes_equal_and_stays_a_dict() -> None:
    a: FrozenDict[str, str] = FrozenDict({"A": "1", "B": "2"})
    b: FrozenDict[str, str] = FrozenDict({"B": "2", "A": "1"})
    assert hash(a) == hash(b) and a == b
    assert isinstance(a, dict)
    assert {a: "cached"}[b] == "cached"
    assert freeze(a) is a
    assert freeze({"A": "1"}) == {"A": "1"}


def test_pickle_and_copy_keep_it_frozen() -> None:
    d: FrozenDict[str, int] = FrozenDict({"x": 1})
    for twin in (pickle.loads(pickle.dumps(d)), copy.copy(d), copy.deepcopy(d)):
        assert type(twin) is FrozenDict and twin == d
        with pytest.raises(TypeError):
            twin["x"] = 2


def test_a_value_freezes_its_mapping_built_or_decoded() -> None:
    built = _Holder(env={"A": "1"})
    decoded = msgspec.json.decode(b'{"env": {"A": "1"}}', type=_Holder)
    for h in (built, decoded):
        assert type(h.env) is FrozenDict
        with pytest.raises(TypeError):
            h.env["A"] = "2"
    assert hash(built) == hash(decoded) and built == decoded
    assert msgspec.json.encode(built) == b'{"env":{"A":"1"}}'
