"""The JSON Schema of override files, made from the structs the loader decodes into. Pure.

`msgspec.json.schema(Config)` gives the shape: the three sections, `Override`'s two fields,
string values, and ``additionalProperties: false`` wherever the structs forbid unknown fields.
The loader (`exedra_engine._core.config.parse`) is a little more lenient and a little stricter than
the structs alone, and the schema says so too, so that schema and loader agree:

- an empty document, and a section or field written but left empty (``env:``), read as empty;
- engine kinds are the kinds of the `Executors` value the schema is made for (default: the
  built-in ones), not any name a kind may have;
- an environment variable's name is not empty and holds no ``=``; no string holds a NUL.

What no JSON Schema can see is left to the loader: duplicate keys, merge keys (``<<``), tags
other than the YAML core ones, and documents past the size budget.
"""

from __future__ import annotations

from typing import Any

import msgspec

from exedra_engine._core.config.overrides import Config
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.struct import freeze

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_NULL = freeze({"type": "null"})
_NO_NUL = "^[^\\u0000]*$"


def config_schema(*, executors: Executors = BUILTIN) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one override file, whose ``engines:`` keys are the
    kinds of `executors`."""
    raw = msgspec.json.schema(Config)
    defs: dict[str, Any] = raw["$defs"]
    defs["Kind"] = {
        "title": "Kind",
        "description": "An executor family.",
        "enum": list(executors.kinds),
    }
    env = {
        "type": "object",
        # "type": a no-op in JSON, whose keys are strings; YAML's may be numbers or booleans.
        "propertyNames": {"type": "string", "minLength": 1, "pattern": "^[^=\\u0000]*$"},
        "additionalProperties": {"type": "string", "pattern": _NO_NUL},
    }
    override = defs["Override"]["properties"]
    override["args"]["items"] = {"type": "string", "pattern": _NO_NUL}
    override["env"] = {**env, "default": {}}
    config = defs["Config"]["properties"]
    config["env"] = {**env, "default": {}}
    config["models"]["propertyNames"] = {"type": "string", "pattern": _NO_NUL}
    config["engines"]["propertyNames"] = {"$ref": "#/$defs/Kind"}
    for section in ("engines", "models"):
        config[section]["additionalProperties"] = _nullable(config[section]["additionalProperties"])
    for props in (override, config):
        for name in list(props):
            props[name] = _nullable(props[name])
    schema = {
        "$schema": SCHEMA_DIALECT,
        "title": "exedra-engine override file",
        "description": "One file of admin overrides (/etc/exedra/engine.d/*.yaml). Values are "
        "strings: quote numbers. `exedra-engine config --check` judges the flags too.",
        "anyOf": [{"$ref": "#/$defs/Config"}, _NULL],
        "$defs": defs,
    }
    out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(schema))  # JSON values only
    return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    default = schema.pop("default", None)
    out: dict[str, Any] = {"anyOf": [schema, _NULL]}
    if default is not None:
        out["default"] = default
    return out
