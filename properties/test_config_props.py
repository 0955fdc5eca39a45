"""Config merging laws and YAML fuzzing (issue 5: 5, hostile YAML)."""

from __future__ import annotations

import re
import tempfile
from functools import reduce
from pathlib import Path
from typing import Any

import msgspec
import yaml
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure, Success

from exedra_engine import Config, ConfigError, load_config
from exedra_engine._core.config.parse import config_from_yaml, merge_configs
from properties.strategies import configs


def dump(c: Config) -> str:
    return yaml.safe_dump(msgspec.to_builtins(c), sort_keys=False)


@given(configs)
def test_yaml_round_trip(c: Config) -> None:
    assert config_from_yaml(dump(c), "c.yaml").unwrap() == c


@given(st.lists(configs, max_size=4))
def test_a_directory_equals_its_files_merged_in_name_order(cs: list[Config]) -> None:
    with tempfile.TemporaryDirectory() as d:
        # Names whose order differs from their creation order.
        for i, c in reversed(list(enumerate(cs))):
            (Path(d) / f"{i:02d}-part.yaml").write_text(dump(c))
        one_by_one = [load_config(Path(d) / f"{i:02d}-part.yaml").unwrap() for i in range(len(cs))]
        assert load_config(d).unwrap() == reduce(merge_configs, one_by_one, Config())


@given(configs, configs, configs)
def test_merging_is_associative(a: Config, b: Config, c: Config) -> None:
    assert merge_configs(merge_configs(a, b), c) == merge_configs(a, merge_configs(b, c))


@given(configs)
def test_the_empty_config_is_an_identity(c: Config) -> None:
    empty = config_from_yaml("", "empty.yaml").unwrap()
    assert merge_configs(empty, c) == c == merge_configs(c, empty)


_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the parser config.py uses
_LOCATED = re.compile(r"fuzz\.yaml:(\d+): ")


def _outcome(text: str) -> None:
    """Any text is a config that survives a round trip, or a one-line error that names the
    file (and a line of it, when it has one)."""
    match config_from_yaml(text, "fuzz.yaml"):
        case Success(c):
            # Accepted means PyYAML reads the document too, as a mapping or as nothing ...
            assert isinstance(yaml.load(text, Loader=_LOADER), dict | None)
            # ... and the value read is exactly what writing it out and reading it back gives.
            assert config_from_yaml(dump(c), "again.yaml") == Success(c)
        case Failure(e):
            assert isinstance(e, ConfigError)
            message = str(e)
            assert message.startswith("fuzz.yaml:") and "\n" not in message, message
            if m := _LOCATED.match(message):
                assert 1 <= int(m.group(1)) <= len(text.splitlines()) + 1, message
        case other:
            raise AssertionError(other)


@given(st.text(max_size=300))
def test_random_text_is_a_config_or_a_config_error(text: str) -> None:
    _outcome(text)


yaml_values: Any = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda kids: (
        st.lists(kids, max_size=3)
        | st.dictionaries(st.text(max_size=6) | st.integers(), kids, max_size=3)
    ),
    max_leaves=12,
)


@given(configs, st.data())
def test_mutated_valid_documents(c: Config, data: st.DataObject) -> None:
    doc: Any = msgspec.to_builtins(c)
    # Replace one node anywhere in the document with an arbitrary YAML value.
    path: list[Any] = []
    node = doc
    while isinstance(node, dict | list) and node and data.draw(st.booleans()):
        key = data.draw(
            st.sampled_from(sorted(node) if isinstance(node, dict) else list(range(len(node))))
        )
        path.append(key)
        node = node[key]
    new = data.draw(yaml_values)
    if path:
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        parent[path[-1]] = new
    else:
        doc = new
    _outcome(yaml.safe_dump(doc))


@given(st.binary(max_size=200))
def test_random_bytes_as_text(raw: bytes) -> None:
    _outcome(raw.decode("utf-8", errors="replace"))
