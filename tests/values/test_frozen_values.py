"""Issue 20 item 4: the library's values are frozen through their mappings, and hashable.

`Config`, `Override` (inside a `Config` too), `LocatedConfig`, `Merged` and `Emitted` hold
`FrozenDict`s however they were made (built, decoded, converted, replaced, loaded from YAML),
and their JSON reads as it did when they held plain dicts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import msgspec
import pytest

from exedra_engine import (
    CPU,
    Config,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    ModelSpec,
    Override,
    explain_launch,
    load_config,
    plan_launch,
)
from exedra_engine._core.config.overrides import redact_config
from exedra_engine._core.config.parse import located_config, merge_all, merge_configs
from exedra_engine._core.emit import Target, emit_files
from exedra_engine._core.emit.options import EmitOptions
from exedra_engine._core.struct import EMPTY, FrozenDict


def _config() -> Config:
    return Config(
        env={"OMP_NUM_THREADS": "4"},
        engines={Kind.LLAMA: Override(args=("--flash-attn", "on"), env={"LLAMA_ARG_MLOCK": "0"})},
        models={"qwen": Override(args=("--jinja",), env={"TZ": "UTC"}), "empty": Override()},
    )


def _mappings(c: Config) -> Iterator[dict[Any, Any]]:
    yield c.env
    yield c.engines
    yield c.models
    for o in (*c.engines.values(), *c.models.values()):
        yield o.env


def _mutations(d: dict[Any, Any]) -> list[Callable[[], object]]:
    key = next(iter(d), "K")
    return [
        lambda: d.__setitem__(key, "x"),
        lambda: d.__delitem__(key),
        lambda: d.update({key: "x"}),
        lambda: d.pop(key),
        d.popitem,
        d.clear,
        lambda: d.setdefault("NEW", "x"),
        lambda: d.__ior__({key: "x"}),
    ]


def _assert_frozen(c: Config) -> None:
    before = msgspec.json.encode(c)
    for d in _mappings(c):
        assert type(d) is FrozenDict
        for mutate in _mutations(d):
            with pytest.raises(TypeError, match="immutable"):
                mutate()
    assert msgspec.json.encode(c) == before


def test_setting_a_config_env_item_raises() -> None:
    c = Config(env={"A": "1"})
    with pytest.raises(TypeError):
        c.env["A"] = "2"
    assert c.env == {"A": "1"}


def test_mutations_raise_on_built_decoded_converted_and_replaced_values() -> None:
    built = _config()
    decoded = msgspec.json.decode(msgspec.json.encode(built), type=Config)
    converted = msgspec.convert(msgspec.to_builtins(built), Config)
    replaced = msgspec.structs.replace(
        built, env={"B": "2"}, models={"m": Override(env={"C": "3"})}
    )
    for c in (built, decoded, converted, replaced, Config()):
        _assert_frozen(c)
    assert decoded == built == converted


def test_nested_override_inside_config_is_frozen() -> None:
    raw = b'{"engines": {"llama": {"args": ["-t", "2"], "env": {"A": "1"}}}}'
    for c in (
        msgspec.json.decode(raw, type=Config),
        Constraints(overrides=msgspec.json.decode(raw, type=Config)).overrides,
        msgspec.json.decode(b'{"overrides": ' + raw + b"}", type=Constraints).overrides,
    ):
        assert c is not None
        inner = c.engines[Kind.LLAMA]
        assert type(inner.env) is FrozenDict
        with pytest.raises(TypeError):
            inner.env["A"] = "2"
        with pytest.raises(TypeError):
            c.engines[Kind.LLAMA] = Override()
        assert inner.env == {"A": "1"}


def test_hash_equal_for_equal_content() -> None:
    a = _config()
    b = Config(  # the same content, every mapping in another order
        models={"empty": Override(), "qwen": Override(env={"TZ": "UTC"}, args=("--jinja",))},
        engines={Kind.LLAMA: Override(env={"LLAMA_ARG_MLOCK": "0"}, args=("--flash-attn", "on"))},
        env={"OMP_NUM_THREADS": "4"},
    )
    assert a == b and hash(a) == hash(b)
    assert hash(Config()) == hash(Config(env={}, engines={}, models={}))
    assert hash(a) != hash(msgspec.structs.replace(a, env={"OMP_NUM_THREADS": "5"}))
    assert {a: "cached"}[b] == "cached"
    # ... so a config can key a functools cache, and a Constraints holding one can too.
    calls: list[Config] = []

    @functools.cache
    def seen(c: Config) -> int:
        calls.append(c)
        return len(c.models)

    assert seen(a) == seen(b) == 2 and calls == [a]
    assert hash(Constraints(overrides=a)) == hash(Constraints(overrides=b))


def test_merges_and_redaction_give_frozen_configs() -> None:
    a, b = _config(), Config(engines={Kind.LLAMA: Override(env={"X": "1"})})
    for c in (merge_configs(a, b), merge_all([a, b]), merge_all([]), redact_config(a)):
        _assert_frozen(c)
    assert merge_configs(a, b) == merge_all([a, b])
    assert merge_all([a, b]).engines[Kind.LLAMA].env == {"LLAMA_ARG_MLOCK": "0", "X": "1"}
    assert a.engines[Kind.LLAMA].env == {"LLAMA_ARG_MLOCK": "0"}  # the inputs stay as they were


def test_config_loaded_from_yaml_is_frozen(tmp_path: Path) -> None:
    (tmp_path / "10-a.yaml").write_text(
        "env: {OMP_NUM_THREADS: '4'}\n"
        "engines:\n  llama:\n    args: [--flash-attn, 'on']\n    env: {LLAMA_ARG_MLOCK: '0'}\n"
        "models:\n  qwen: {env: {TZ: UTC}}\n"
    )
    (tmp_path / "20-b.yaml").write_text("models:\n  qwen: {args: [--jinja]}\n")
    for path in (tmp_path, tmp_path / "10-a.yaml", str(tmp_path).encode()):
        c = load_config(path).unwrap()
        _assert_frozen(c)
        hash(c)
    merged = load_config(tmp_path).unwrap()
    assert merged.models["qwen"] == Override(args=("--jinja",), env={"TZ": "UTC"})
    located = located_config((tmp_path / "10-a.yaml").read_text(), "10-a.yaml")
    _assert_frozen(located.config)
    assert type(located.lines) is FrozenDict and located.line("$.env.OMP_NUM_THREADS") == 1
    with pytest.raises(TypeError):
        located.lines["$.env"] = 9
    hash(located)


class _PlainOverride(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What `Override` was before: a plain dict, for comparing the JSON."""

    args: tuple[str, ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)


class _PlainConfig(msgspec.Struct, kw_only=True, omit_defaults=True):
    env: dict[str, str] = msgspec.field(default_factory=dict)
    engines: dict[str, _PlainOverride] = msgspec.field(default_factory=dict)
    models: dict[str, _PlainOverride] = msgspec.field(default_factory=dict)


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"env": {}},
        {"env": {"A": "1"}, "models": {"m": {}}},
        {"models": {"m": {"env": {}}, "n": {"args": ["-x"], "env": {"B": "2"}}}},
        {"engines": {"llama": {"env": {}}, "transcribe": {"args": ["--beam-size", "5"]}}},
    ],
)
def test_config_json_is_what_plain_dicts_gave(raw: Mapping[str, object]) -> None:
    frozen = msgspec.convert(raw, Config)
    plain = msgspec.convert(raw, _PlainConfig)
    assert msgspec.json.encode(frozen) == msgspec.json.encode(plain)
    assert msgspec.to_builtins(frozen) == msgspec.to_builtins(plain)
    # An empty mapping is the shared default, so omit_defaults still leaves it out.
    assert all(d is EMPTY for d in _mappings(frozen) if not d)


def _shallow(c: Config) -> Config:
    """`c` as it was before: every mapping a plain, mutable dict."""
    out = msgspec.structs.replace(c)
    for name in ("engines", "models"):
        inner = {}
        for k, o in getattr(c, name).items():
            o2 = msgspec.structs.replace(o)
            msgspec.structs.force_setattr(o2, "env", dict(o.env))
            inner[k] = o2
        msgspec.structs.force_setattr(out, name, inner)
    msgspec.structs.force_setattr(out, "env", dict(c.env))
    return out


def test_plan_json_unchanged() -> None:
    spec = ModelSpec(id="qwen", path="/m/qwen.gguf", kind=Kind.LLAMA, run_args=("--temp", "0.7"))
    hw = Hardware(
        cpu=CPU(threads=8, ram=1 << 35),
        executors=(ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server"),),
    )
    frozen = _config()
    shallow = _shallow(frozen)
    assert type(shallow.env) is dict and type(shallow.models["qwen"].env) is dict
    plans = []
    for c in (frozen, shallow):
        con = Constraints(overrides=c, extra_args=("--seed", "42"), extra_env=("A=1",))
        plans.append(
            (
                msgspec.json.encode(plan_launch(spec, hw, con).unwrap()),
                msgspec.json.encode(explain_launch(spec, hw, con).unwrap()),
            )
        )
    assert plans[0] == plans[1]
    assert b'"TZ=UTC"' in plans[0][0] and b'"--flash-attn"' in plans[0][0]


def test_merged_settings_and_emitted_files_are_frozen() -> None:
    spec = ModelSpec(id="qwen", path="/m/qwen.gguf", kind=Kind.LLAMA)
    hw = Hardware(
        cpu=CPU(threads=8, ram=1 << 35),
        executors=(ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server"),),
    )
    con = Constraints(host="0.0.0.0", extra_args=("--ctx-size", "4096"))
    from exedra_engine._core.plan.layers import Merged

    merged = Merged(
        args=(), env=(), settings={"ctx_size": ("4096",)}, env_map={"A": "1"}, env_layers={}
    )
    for field in (merged.settings, merged.env_map, merged.env_layers, merged.replaced):
        assert type(field) is FrozenDict
    assert Merged(args=(), env=()).settings == {}
    with pytest.raises(TypeError):
        merged.settings["x"] = ()
    with pytest.raises(TypeError):
        merged.env_map["A"] = "2"
    plan = plan_launch(spec, hw, con).unwrap()
    emitted = emit_files(plan, Target.SYSTEMD, EmitOptions())
    assert type(emitted.files) is FrozenDict and emitted.files
    with pytest.raises(TypeError):
        emitted.files.clear()
    hash(emitted)
