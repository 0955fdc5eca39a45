"""The JSON Schema of override files and the loader agree: on generated documents, some valid
and most a little wrong (a number where a string goes, an unknown key, an unknown kind, a
name with ``=``), the schema accepts exactly what `config_from_yaml` accepts (issue 13)."""

from __future__ import annotations

from typing import Any

import jsonschema
import yaml
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Success

from exedra_engine._core.config.parse import config_from_yaml
from exedra_engine._core.config.schema import config_schema

VALIDATOR = jsonschema.Draft202012Validator(config_schema())

text = st.text(alphabet=st.sampled_from("aZ0-_.=, \0é"), max_size=6)
scalars = st.one_of(
    text,
    st.integers(-5, 5),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
)
anything = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)),
    max_leaves=6,
)


def almost(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly `good`, sometimes anything at all."""
    return st.one_of(good, good, good, anything)


env = almost(st.dictionaries(st.one_of(st.sampled_from(["A", "OMP_X", "", "B=C"]), text),
                             almost(text), max_size=3))  # fmt: skip
override = almost(
    st.fixed_dictionaries(
        {},
        optional={
            "args": almost(st.lists(almost(text), max_size=4)),
            "env": env,
            "argz": anything,
        },
    )
)
document = almost(
    st.fixed_dictionaries(
        {},
        optional={
            "env": env,
            "engines": almost(
                st.dictionaries(
                    st.sampled_from(["llama", "transcribe", "vllm", "Llama", ""]),
                    override,
                    max_size=3,
                )
            ),
            "models": almost(st.dictionaries(text, override, max_size=3)),
            "global": anything,
        },
    )
)


@given(document)
def test_the_schema_accepts_exactly_what_the_loader_accepts(doc: Any) -> None:
    body = yaml.safe_dump(doc, allow_unicode=True)
    loaded = config_from_yaml(body, "gen.yaml")
    by_schema = VALIDATOR.is_valid(yaml.safe_load(body))
    assert by_schema == isinstance(loaded, Success), (body, loaded)
