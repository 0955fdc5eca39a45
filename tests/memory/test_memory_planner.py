"""Issue 19 item 4: the planner uses the memory estimate (refuses what cannot fit, picks a
context that does, sizes the prompt cache, says when the executor's fitter is switched off)."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest
from returns.result import Failure

from exedra_engine import (
    Config,
    Constraints,
    DoesNotFit,
    Kind,
    LaunchPlan,
    ModelInfo,
    ModelSpec,
    Override,
    PlanError,
    check_config,
    explain_launch,
    plan_launch,
)
from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._core.gguf.inventory import ModelInventory
from exedra_engine._core.memory.decide import PROMPT_CACHE_FLOOR_MIB, PROMPT_CACHE_STATES
from exedra_engine._core.memory.fit_params import FitMeasurement, FitRow, memory_settings
from exedra_engine._core.memory.settings import MIB
from exedra_engine._core.values import Hardware
from exedra_engine._shell.inspect import read_inventory
from exedra_engine._shell.plan import plan_explained
from exedra_engine.testing import write_tiny_llama
from tests.conftest import cli
from tests.memory_models import cpu_host, gemma3_270m, gpu_host, llama_135m, model_info

SPEC = ModelSpec(id="g", path="/m/gemma.gguf", kind=Kind.LLAMA)
NO_CONSTRAINTS = Constraints()


def info(inv: ModelInventory) -> ModelInfo:
    return model_info(inv, SPEC.path)


def planned(
    inv: ModelInventory, hw: Hardware, c: Constraints = NO_CONSTRAINTS, spec: ModelSpec = SPEC
) -> LaunchPlan:
    return plan_launch(spec, hw, c, model=info(inv), inventory=inv).unwrap()


def refused(inv: ModelInventory, hw: Hardware, c: Constraints) -> DoesNotFit:
    got = plan_launch(SPEC, hw, c, model=info(inv), inventory=inv)
    assert isinstance(got, Failure), got
    err = got.failure()
    assert isinstance(err, DoesNotFit)
    assert isinstance(err, PlanError)
    return err


def test_huge_explicit_ctx_is_refused_naming_both_sizes() -> None:
    t0 = time.perf_counter()
    err = refused(gemma3_270m(), cpu_host(), Constraints(ctx=100_000_000))
    assert time.perf_counter() - t0 < 1.0
    msg = str(err)
    assert msg.startswith("ctx 100000000 needs ")
    assert "GiB of host memory but 18 GiB usable (20 GiB available - 10% margin)" in msg
    assert "the biggest part is the KV cache" in msg


def test_plan_carries_memory() -> None:
    p = planned(gemma3_270m(), cpu_host(), Constraints(ctx=8192))
    assert p.memory is not None
    assert (p.memory.source, p.memory.ctx) == ("estimated", 8192)
    assert p.memory.host.total == p.memory.host.parts.total
    assert p.memory.host.reserved > p.memory.host.total  # the logits are reserved, not touched
    again = msgspec.json.decode(msgspec.json.encode(p), type=LaunchPlan)
    assert again == p


def test_no_inventory_no_memory() -> None:
    p = plan_launch(SPEC, cpu_host(), Constraints(ctx=8192)).unwrap()
    assert p.memory is None
    assert "--cache-ram" not in p.args


def test_unset_ctx_gets_one_that_fits() -> None:
    # 1 GiB usable: Gemma's own 32768 fits, a 135M llama's 8192 too; a 4-slot big KV does not
    inv = msgspec.structs.replace(llama_135m(), context=131072)
    hw = cpu_host(available=1 << 30)
    p = planned(inv, hw)
    assert p.memory is not None
    i = p.args.index("--ctx-size")
    ctx = int(p.args[i + 1])
    assert 4096 <= ctx < 131072 and ctx % 256 == 0
    assert p.memory.ctx == ctx
    assert p.memory.host.total <= (1 << 30) * 9 // 10
    # one page more would not have fitted
    bigger = refused(inv, hw, Constraints(ctx=ctx + 256, extra_args=("--cache-ram", "0")))
    assert "host memory" in str(bigger)


def test_unset_ctx_never_below_4096() -> None:
    inv = msgspec.structs.replace(llama_135m(), context=131072)
    err = refused(inv, cpu_host(available=170 * MIB), Constraints())
    assert str(err).startswith("the smallest context planned, 4096, needs ")


def test_small_own_context_is_the_floor() -> None:
    inv = msgspec.structs.replace(llama_135m(), context=2048)
    p = planned(inv, cpu_host(available=1 << 30))
    assert "--ctx-size" not in p.args
    assert p.memory is not None and p.memory.ctx == 2048


def test_cache_ram_sized_to_the_budget() -> None:
    p = planned(llama_135m(), cpu_host(available=2 << 30), Constraints(ctx=4096))
    assert p.memory is not None
    i = p.args.index("--cache-ram")
    cache = int(p.args[i + 1])
    assert 0 < cache < 8192
    assert p.memory.host.parts.prompt_cache == cache * MIB
    assert p.memory.host.total <= (2 << 30) * 9 // 10
    # a roomy host does not get llama-server's 8 GiB default either: the cache holds
    # PROMPT_CACHE_STATES copies of the planned KV cache (at least 256 MiB)
    roomy = planned(llama_135m(), cpu_host(available=64 << 30), Constraints(ctx=4096))
    assert roomy.memory is not None
    kv = roomy.memory.host.parts.kv
    want = max(PROMPT_CACHE_FLOOR_MIB, -(-PROMPT_CACHE_STATES * kv // MIB))
    assert roomy.args[roomy.args.index("--cache-ram") + 1] == str(want)
    assert roomy.memory.host.parts.prompt_cache == want * MIB < 8192 * MIB
    # a layer's own --cache-ram is never replaced (see the next test)


def test_cache_ram_from_a_layer_is_kept_or_refused() -> None:
    hw = cpu_host(available=2 << 30)
    p = planned(llama_135m(), hw, Constraints(ctx=4096, extra_args=("--cache-ram", "100")))
    assert p.args.count("--cache-ram") == 1
    assert p.args[p.args.index("--cache-ram") + 1] == "100"
    err = refused(llama_135m(), hw, Constraints(ctx=4096, extra_args=("--cache-ram", "8192")))
    assert "the biggest part is the prompt cache, 8.0 GiB" in str(err)


def test_unbounded_cache_is_a_finding() -> None:
    e = explain_launch(
        SPEC,
        cpu_host(),
        Constraints(ctx=4096, extra_args=("--cache-ram", "-1")),
        model=info(llama_135m()),
        inventory=llama_135m(),
    ).unwrap()
    assert [f.code for f in e.findings] == ["unbounded-cache"]


def test_fitter_off_findings_in_plan_and_config_check(tmp_path: Path) -> None:
    o = Config(engines={Kind.LLAMA: Override(args=("-ngl", "20", "-sm", "row", "-ts", "1,1"))})
    e = explain_launch(
        SPEC,
        gpu_host(8 << 30, 8 << 30),
        Constraints(ctx=4096, overrides=o),
        model=info(llama_135m()),
        inventory=llama_135m(),
    ).unwrap()
    got = [(f.code, f.token) for f in e.findings]
    assert got == [("fitter-off", "-ngl"), ("fitter-off", "-sm"), ("fitter-off", "-ts")]
    f = tmp_path / "10-gpu.yaml"
    f.write_text("engines:\n  llama:\n    args: [-ot, 'exps=CPU', --split-mode, layer]\n")
    report = check_config(f).unwrap()
    assert [(x.code, x.line) for x in report.findings] == [("fitter-off", 3)]


def test_device_overflow_refused_only_when_fitter_off() -> None:
    inv = llama_135m()
    small = gpu_host(40 * MIB)
    # -ngl unset: llama.cpp's fitter moves layers back to the host; the plan goes ahead
    p = planned(inv, small, Constraints(ctx=4096))
    assert p.memory is not None and p.memory.devices[0].name == "Vulkan0"
    err = refused(inv, small, Constraints(ctx=4096, extra_args=("-ngl", "99")))
    assert "Vulkan0's free memory" in str(err) and "40 MiB free" in str(err)


def test_measurement_is_used_when_it_matches() -> None:
    inv = gemma3_270m()
    base = planned(inv, cpu_host(), Constraints(ctx=4096))
    settings = memory_settings(LLAMA, base.args, base.env)
    row = FitRow(name="Host", model=222 * MIB, context=50 * MIB, compute=514 * MIB)
    # a hardware file from the target names the model where the target keeps it
    m = FitMeasurement(
        model="/srv/models/" + inv.paths[0], settings=settings, ctx=4096, host=row, build="b1"
    )
    hw = msgspec.structs.replace(cpu_host(), measurements=(m,))
    p = planned(inv, hw, Constraints(ctx=4096))
    assert p.memory is not None and p.memory.source == "measured"
    assert p.memory.host.reserved_parts.compute == 514 * MIB
    other = planned(inv, hw, Constraints(ctx=8192))
    assert other.memory is not None and other.memory.source == "estimated"


def test_shell_reads_the_inventory(tmp_path: Path) -> None:
    p = write_tiny_llama(tmp_path / "t.gguf")
    spec = ModelSpec(id="t", path=str(p), kind=Kind.LLAMA)
    e = plan_explained(spec, cpu_host(), Constraints(), check_ports=False).unwrap()
    assert e.plan.memory is not None
    assert e.plan.model is not None and e.plan.model.size == p.stat().st_size
    assert e.memory and e.memory[0].startswith("ctx 256: Host (resident, estimated): weights ")
    err = plan_explained(spec, cpu_host(), Constraints(ctx=100_000_000), check_ports=False)
    assert isinstance(err, Failure) and isinstance(err.failure(), DoesNotFit)


@pytest.mark.parametrize("kind", [Kind.TRANSCRIBE])
def test_no_memory_for_executors_without_memory_flags(kind: Kind) -> None:
    spec = ModelSpec(id="w", path="/m/w.bin", kind=kind)
    hw = msgspec.structs.replace(
        cpu_host(),
        executors=(
            *cpu_host().executors,
            msgspec.structs.replace(cpu_host().executors[0], kind=kind),
        ),
    )
    assert plan_launch(spec, hw, Constraints()).unwrap().memory is None


def test_real_model_huge_ctx_refused_in_well_under_a_second(
    real_model: Path, tmp_path: Path
) -> None:
    # The issue's own case: Gemma 3 270M asked for 100,000,000 tokens on a 24 GiB host; the
    # executor would spend a minute before failing to allocate a 307,200,000,000-byte KV.
    node = tmp_path / "node.json"
    hw = cpu_host(ram=24 << 30, available=None)
    node.write_bytes(msgspec.json.encode(hw))
    args = ("plan", "--hardware", str(node), "--model", str(real_model), "--kind", "llama")
    t0 = time.perf_counter()
    r = cli(*args, "--ctx", "100000000", "--no-port-check")
    took = time.perf_counter() - t0
    assert r.code == 2
    assert took < 0.5, took
    assert "ctx 100000000 needs 287 GiB of host memory but 22 GiB usable (24 GiB total" in r.err
    assert "the biggest part is the KV cache, 286 GiB" in r.err
    ok = cli(*args, "--no-port-check", "--json")
    assert ok.code == 0, ok.err
    memory = msgspec.json.decode(ok.out)["memory"]
    assert memory["source"] == "estimated" and memory["ctx"] == 32768
    assert memory["host"]["total"] < memory["host"]["reserved"]


def test_side_models_named_by_a_layer_are_counted(tmp_path: Path) -> None:
    model = write_tiny_llama(tmp_path / "main.gguf")
    draft = write_tiny_llama(tmp_path / "draft.gguf", quantized=True)
    spec = ModelSpec(id="t", path=str(model), kind=Kind.LLAMA)
    c = Constraints(ctx=1024, extra_args=("--model-draft", str(draft)))
    alone = plan_explained(spec, cpu_host(), Constraints(ctx=1024), check_ports=False).unwrap()
    both = plan_explained(spec, cpu_host(), c, check_ports=False).unwrap()
    assert alone.plan.memory is not None and both.plan.memory is not None
    grew = both.plan.memory.host.parts.weights - alone.plan.memory.host.parts.weights
    assert grew == read_inventory(draft).unwrap().tensor_bytes
