"""The values share one base: frozen, keyword-only, strict when decoded."""

from __future__ import annotations

import msgspec
import pytest

import exedra_engine as engine
from exedra_engine._core.struct import Value

PLAN_JSON = (
    b'{"spec": {"path": "/m.gguf", "kind": "llama"}, "command": "/bin/llama-server",'
    b' "args": ["--port", "18080"], "host": "127.0.0.1", "port": 18080, "ready": "/health"}'
)
VALUES = [
    getattr(engine, name)
    for name in engine.__all__
    if isinstance(getattr(engine, name, None), type) and issubclass(getattr(engine, name), Value)
]


def test_every_public_value_has_the_base() -> None:
    names = {v.__name__ for v in VALUES}
    assert {"LaunchPlan", "ModelSpec", "Constraints", "Hardware", "Config", "Endpoint"} <= names
    for v in VALUES:
        assert v.__struct_config__.frozen, v
        assert v.__struct_config__.forbid_unknown_fields, v


def test_an_edited_plan_with_a_misspelt_field_is_an_error() -> None:
    plan = msgspec.json.decode(PLAN_JSON, type=engine.LaunchPlan)
    assert plan.port == 18080
    edited = PLAN_JSON.replace(b'"ready"', b'"raedy": "/x", "ready"')
    with pytest.raises(msgspec.ValidationError, match="unknown field `raedy`"):
        msgspec.json.decode(edited, type=engine.LaunchPlan)
    nested = PLAN_JSON.replace(b'"kind": "llama"', b'"kind": "llama", "run_arg": []')
    with pytest.raises(msgspec.ValidationError, match=r"unknown field `run_arg`.*\$\.spec"):
        msgspec.json.decode(nested, type=engine.LaunchPlan)


def test_values_are_frozen() -> None:
    plan = msgspec.json.decode(PLAN_JSON, type=engine.LaunchPlan)
    with pytest.raises(AttributeError):
        plan.port = 1  # type: ignore[misc]
