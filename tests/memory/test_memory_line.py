"""The plan's memory line says what it means: the resident peak apart from the prompt cache
that fills with use, "reserved" only for a GPU; a context above the trained one is a finding;
a refusal names what would fit instead."""

from __future__ import annotations

from pathlib import Path

import msgspec
from returns.result import Failure

from exedra_engine import Constraints, DoesNotFit, Kind, ModelInfo, ModelSpec, explain_launch
from exedra_engine._core.gguf.inventory import ModelInventory
from exedra_engine._core.memory.plan import MemoryParts, MemoryPlan, PlaceMemory
from exedra_engine._core.memory.settings import MIB
from exedra_engine._core.plan.planner import plan_launch
from exedra_engine.cli.render import MEMORY_WORDS, memory_lines
from tests.memory_models import cpu_host, gemma3_270m, llama_135m, model_info

SPEC = ModelSpec(id="g", path="/m/gemma.gguf", kind=Kind.LLAMA)


def _info(inv: ModelInventory) -> ModelInfo:
    return model_info(inv, SPEC.path)


def _place(name: str, parts: MemoryParts, reserved: int, available: int) -> PlaceMemory:
    return PlaceMemory(
        name=name,
        total=parts.total,
        parts=parts,
        reserved=reserved,
        reserved_parts=MemoryParts(other=reserved),
        available=available,
    )


def test_memory_line_shows_the_resident_peak_apart_from_the_prompt_cache() -> None:
    host = _place(
        "Host",
        MemoryParts(weights=236 * MIB, kv=62 * MIB, other=138 * MIB, prompt_cache=256 * MIB),
        reserved=1024 * MIB,
        available=23 << 30,
    )
    gpu = MemoryParts(weights=100 * MIB)
    dev = _place("CUDA0", gpu, reserved=300 * MIB, available=8 << 30)
    lines = memory_lines(MemoryPlan(source="estimated", ctx=8192, host=host, devices=(dev,)))
    assert lines == [
        "ctx 8192, estimated: host 436 MiB resident peak + up to 256 MiB prompt cache"
        " = 692 MiB; host has 23 GiB",
        "CUDA0 300 MiB reserved, 8.0 GiB free",
    ]
    # what llama.cpp reserves on the host judges nothing: not shown
    assert "1.0 GiB" not in lines[0]


def test_memory_line_without_a_prompt_cache_names_the_peak_alone() -> None:
    host = _place("Host", MemoryParts(weights=236 * MIB, other=100 * MIB), 900 * MIB, 1 << 30)
    (line,) = memory_lines(MemoryPlan(source="estimated", ctx=4096, host=host))
    assert line == "ctx 4096, estimated: host 336 MiB resident peak; host has 1.0 GiB"


def test_plan_help_gives_a_word_for_each_figure() -> None:
    for word in ("'resident peak'", "'prompt cache'", "--cache-ram", "'reserved'", "fills"):
        assert word in MEMORY_WORDS
    from tests.conftest import cli

    r = cli("plan", "--help")
    assert "'resident peak' is the host memory" in " ".join(r.stdout.split())


def test_ctx_above_the_trained_context_is_a_warning_and_refused_under_strict() -> None:
    inv = llama_135m()  # trained for 8192
    e = explain_launch(
        SPEC, cpu_host(), Constraints(ctx=32768), model=_info(inv), inventory=inv
    ).unwrap()
    (f,) = [f for f in e.findings if f.code == "ctx-above-trained"]
    assert f.severity == "warning"
    assert f.token == "--ctx-size 32768"
    assert f.path == "ctx"  # the planner's --ctx (or a group ctx:), not args anyone wrote
    assert "above the 8192 tokens the model was trained for" in f.message
    assert "--ctx 8192 or less" in f.message


def test_ctx_within_the_trained_context_per_slot_is_no_finding() -> None:
    inv = llama_135m()
    for c in (
        Constraints(ctx=8192),
        Constraints(),  # the model's own
        # four slots of their own: 8192 a slot
        Constraints(ctx=32768, extra_args=("-np", "4")),
    ):
        e = explain_launch(SPEC, cpu_host(), c, model=_info(inv), inventory=inv).unwrap()
        assert [f.code for f in e.findings] == [], c
    # a caller's layer is named as the one that set it
    e = explain_launch(
        SPEC,
        cpu_host(),
        Constraints(extra_args=("-c", "16384")),
        model=_info(inv),
        inventory=inv,
    ).unwrap()
    assert [(f.code, f.path) for f in e.findings] == [("ctx-above-trained", "caller args")]


def test_strict_plan_refuses_a_ctx_above_the_trained_one(tmp_path: Path) -> None:
    from exedra_engine.testing import write_tiny_llama
    from tests.conftest import cli

    model = write_tiny_llama(tmp_path / "m.gguf")
    ctx = 2 * _trained(str(model))
    r = cli("plan", "--model", str(model), "--kind", "llama", "--no-config", "--ctx", str(ctx))
    assert r.returncode == 0
    assert "[ctx-above-trained]" in r.stderr and "trained for" in r.stderr
    r = cli(
        "plan", "--model", str(model), "--kind", "llama", "--no-config", "--ctx", str(ctx),
        "--strict",
    )  # fmt: skip
    assert r.returncode == 2 and "ctx-above-trained" in r.stderr


def _trained(path: str) -> int:
    from exedra_engine import inspect

    return inspect(path).unwrap().context


def test_does_not_fit_names_the_largest_context_and_the_q8_0_saving() -> None:
    inv = gemma3_270m()
    hw = cpu_host(available=512 * MIB)
    got = plan_launch(SPEC, hw, Constraints(ctx=32768), model=_info(inv), inventory=inv)
    assert isinstance(got, Failure)
    msg = str(got.failure())
    assert isinstance(got.failure(), DoesNotFit)
    assert ". Instead: the largest context that fits is " in msg
    ctx = int(msg.split("the largest context that fits is ")[1].split(" ", maxsplit=1)[0])
    assert 4096 <= ctx < 32768 and ctx % 256 == 0
    assert f"(--ctx {ctx})" in msg
    assert "a q8_0 KV cache (-ctk q8_0 -ctv q8_0) would save " in msg
    # the hint is true: the context it names plans, and so does q8_0 where it says "and fit"
    assert plan_launch(SPEC, hw, Constraints(ctx=ctx), model=_info(inv), inventory=inv)
    if "and fit at ctx" in msg:
        q8 = Constraints(ctx=32768, extra_args=("-ctk", "q8_0", "-ctv", "q8_0"))
        assert plan_launch(SPEC, hw, q8, model=_info(inv), inventory=inv).unwrap()


def test_does_not_fit_at_the_trained_context_says_so() -> None:
    inv = msgspec.structs.replace(gemma3_270m(), context=8192)
    got = plan_launch(
        SPEC, cpu_host(available=512 * MIB), Constraints(ctx=10**8), model=_info(inv),
        inventory=inv,
    )  # fmt: skip
    assert isinstance(got, Failure)
    msg = str(got.failure())
    assert "the model's trained context, 8192, fits (--ctx 8192)" in msg
    assert "and still not fit at ctx 100000000" in msg
