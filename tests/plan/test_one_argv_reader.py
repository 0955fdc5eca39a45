"""One argv reader, provenance as data (issue 20 item 3). The property side, every consumer
against the reader on hostile argvs, is properties/test_one_argv_reader_props.py."""

from __future__ import annotations

import json

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
    PortInUse,
    explain_launch,
    plan_launch,
)
from exedra_engine._core.emit.ready import setting_layer
from exedra_engine._core.executors.builtin import executor_profile
from exedra_engine._core.plan import planner
from exedra_engine._core.plan.layer_checks import Layer
from exedra_engine._core.plan.layers import merge
from exedra_engine._core.plan.provenance import Said, redact_provenance
from exedra_engine._core.secrets import REDACTED

HOST = Hardware(
    cpu=CPU(threads=8, ram=1 << 34),
    executors=(ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server"),),
)
SPEC = ModelSpec(id="qwen", path="/m/qwen.gguf", kind=Kind.LLAMA)
LLAMA = executor_profile(Kind.LLAMA)


def test_item_knows_where_it_stands() -> None:
    items = LLAMA.flags.read_items(("--temp", "0.7", "-c=8", "--zz", "--no-webui", "-np"))
    assert [(it.key, it.at, it.inline, it.value_at, it.problem) for it in items] == [
        ("--temperature", 0, False, (1,), None),
        ("--ctx-size", 2, True, (2,), None),
        (None, 3, False, (), None),
        ("--webui", 4, False, (), None),
        ("--parallel", 5, False, (), "missing-value"),
    ]
    checked = LLAMA.flags.read_items(
        ("--zz", "1", "2", "x", "--temp", "--top-k", "4"), checking=True
    )
    assert [(it.at, it.values, it.problem) for it in checked] == [
        (0, ("1", "2", "x"), "unknown-flag"),
        (4, (), "value-is-flag"),
        (5, ("4",), None),
    ]


def test_port_in_use_is_worded_from_the_port_flags_key_in_one_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    real = planner.staged

    def counted(*a: object, **kw: object) -> object:
        calls.append(1)
        return real(*a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(planner, "staged", counted)
    cfg = Config(models={"qwen": Override(args=("--port=9000",))})
    r = plan_launch(SPEC, HOST, Constraints(overrides=cfg), ports_in_use={9000})
    assert "set by config models.qwen" in str(r.failure())
    assert isinstance(r.failure(), PortInUse)
    assert len(calls) == 1  # no second, explaining, plan to word the error
    r = plan_launch(
        SPEC, HOST, Constraints(extra_env=("LLAMA_ARG_PORT=9001",)), ports_in_use={9001}
    )
    assert "set by caller via LLAMA_ARG_PORT" in str(r.failure())


def test_merge_records_provenance_as_data() -> None:
    m = merge(
        LLAMA,
        [
            Layer(name="low", rank=0, args=("--temp", "0.1", "-c", "2"), env=(("TZ", "A"),)),
            Layer(name="high", rank=1, args=("--ctx-size=3",), env=(("TZ", "B"),)),
        ],
    )
    by_key = {p.key: p for p in m.provenance}
    ctx = by_key["--ctx-size"]
    assert ctx.said == Said(layer="high", what="arg", tokens=("--ctx-size", "3"), at=0)
    assert ctx.replaced == (Said(layer="low", what="arg", tokens=("-c", "2"), at=2),)
    assert by_key["TZ"].replaced == (Said(layer="low", what="env", tokens=("TZ", "A")),)
    assert by_key["TZ"].said.layer == "high"
    # text only when asked: the rendering keeps today's wording
    src = {s.key: s for s in m.sources}
    assert src["--ctx-size"].text == "--ctx-size 3"
    assert src["--ctx-size"].overrode == ("low: -c 2",)


def test_explain_redacts_each_token_where_it_stands() -> None:
    con = Constraints(
        api_key="sk-0123456789",
        extra_args=("--hf-token", "hf-secret", "--alias", "sk-0123456789"),
        extra_env=("OTHER=sk-0123456789",),
    )
    e = explain_launch(SPEC, HOST, con).unwrap()
    secrets = frozenset({"sk-0123456789", "hf-secret"})
    shown = [redact_provenance(p, secrets).source() for p in e.provenance]
    text = msgspec.json.encode(shown).decode()
    assert "sk-0123456789" not in text and "hf-secret" not in text
    by_key = {s.key: s for s in shown}
    # --hf-token travels in its variable (HF_TOKEN), never argv: hidden there by its name.
    assert "--hf-token" not in by_key and by_key["HF_TOKEN"].text == f"HF_TOKEN={REDACTED}"
    assert by_key["--alias"].text == f"--alias {REDACTED}"
    assert by_key["OTHER"].text == f"OTHER={REDACTED}"


def test_emit_names_a_fields_layer_by_key() -> None:
    e = explain_launch(
        SPEC, HOST, Constraints(overrides=Config(models={"qwen": Override(args=("--port=9100",))}))
    ).unwrap()
    assert setting_layer(e.sources, LLAMA.port_flag, LLAMA.port_env) == "config models.qwen"


def test_shaping_returns_its_decisions_as_data() -> None:
    import io

    from exedra_engine._core.emit import EmitOptions, Target, emit_files
    from exedra_engine._core.emit.ready import READ_BACK
    from exedra_engine._core.emit.shape import shape
    from exedra_engine.cli.emit_out import print_origins

    con = Constraints(
        host="0.0.0.0",
        no_gpu=True,
        overrides=Config(models={"qwen": Override(args=("--port=9100",))}),
    )
    e = explain_launch(SPEC, HOST, con).unwrap()
    s = shape(e.plan, Target.K8S, EmitOptions(), HOST, e.sources)
    assert s == shape(e.plan, Target.K8S, EmitOptions(), HOST, e.sources)  # pure
    by = {o.field: o for o in s.origins}
    # the layer is data, found by the port flag's key in the provenance; no text for it
    assert (by["port"].value, by["port"].layer, by["port"].why) == (
        "9100",
        "config models.qwen",
        "",
    )
    assert (by["host"].layer, by["host"].why) == ("engine", "")  # Constraints.host
    # without provenance (a saved plan) the plan's argv is all that says it
    bare = {o.field: o for o in shape(e.plan, Target.K8S, EmitOptions(), HOST).origins}
    assert (bare["port"].layer, bare["port"].why) == ("", READ_BACK)
    assert (by["gpu"].value, by["gpu"].source) == ("none", "plan")
    assert (by["stop timeout"].source, by["name"].source) == ("default", "default")
    # the text is rendered only where --explain prints
    out = io.StringIO()
    print_origins(emit_files(e.plan, Target.K8S, EmitOptions(), HOST, e.sources), out)
    port_row = next(
        line for line in out.getvalue().splitlines() if line.lstrip().startswith("port")
    )
    assert port_row.endswith("plan  (set by the config models.qwen layer)")
    assert json.loads(msgspec.json.encode(s.origins))[0]["field"] == "name"
