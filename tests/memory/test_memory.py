"""Issue 19 item 2: the pure memory estimate, against llama.cpp's own figures."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._core.memory.estimate import (
    estimate_memory,
    matching_measurement,
    with_measurement,
)
from exedra_engine._core.memory.explain import explain_memory
from exedra_engine._core.memory.fit_params import FitMeasurement, FitRow, memory_settings
from exedra_engine._core.memory.kv import context_geometry, kv_bytes
from exedra_engine._core.memory.settings import MIB, fitter_off, read_settings
from exedra_engine._shell.inspect import read_inventory
from tests.conftest import _executor
from tests.memory_models import cpu_host, gemma3_270m, gpu_host, llama_135m

# llama-fit-params --fit-print on, on this project's build (docs/explanation.md): the
# context column at -np 1, in MiB.
FIT_CONTEXT = [
    (gemma3_270m, 4096, 27),
    (gemma3_270m, 32768, 111),
    (llama_135m, 2048, 45),
    (llama_135m, 8192, 180),
]


@pytest.mark.parametrize(("model", "ctx", "mib"), FIT_CONTEXT)
def test_kv_matches_fit_params(model: object, ctx: int, mib: int) -> None:
    inv = model()  # type: ignore[operator]
    s = read_settings(LLAMA, ["-c", str(ctx), "-np", "1"])
    got = sum(kv_bytes(inv, s, context_geometry(inv, s)))
    assert abs(got / MIB - mib) <= 1


def test_server_default_is_four_unified_slots() -> None:
    # -np unset: 4 slots share the KV; Gemma's window layers then keep 4 x 512 + 512 cells
    inv = gemma3_270m()
    s = read_settings(LLAMA, ["-c", "4096"])
    sh = context_geometry(inv, s)
    assert (sh.seqs, sh.streams, sh.ctx) == (4, 1, 4096)
    swa_cells = 2560
    expected = (3 * 4096 + 15 * swa_cells) * 1024
    assert sum(kv_bytes(inv, s, sh)) == expected


def test_reserved_compute_is_mostly_logits() -> None:
    # fit-params: Gemma's compute is 514 MiB at -ub 512 and 64 MiB at -ub 64
    hw = cpu_host()
    for ub, mib in ((512, 514), (64, 64)):
        m = estimate_memory(gemma3_270m(), ["-c", "4096", "-np", "1", "-ub", str(ub)], hw, LLAMA)
        assert abs(m.host.reserved_parts.compute / MIB - mib) <= 16


def test_resident_peak_within_goal_of_measured() -> None:
    # VmHWM after a ~700-token prompt, with the prompt cache off (docs/explanation.md)
    hw = cpu_host()
    for model, ctx, peak in (
        (gemma3_270m, 4096, 404),
        (gemma3_270m, 32768, 488),
        (llama_135m, 2048, 192),
        (llama_135m, 8192, 327),
    ):
        m = estimate_memory(model(), ["-c", str(ctx), "--cache-ram", "0"], hw, LLAMA)
        got = m.host.total / MIB
        assert abs(got - peak) <= max(32, peak / 10), (model.__name__, ctx, got, peak)


def test_prompt_cache_default_and_flags() -> None:
    hw = cpu_host()
    inv = llama_135m()
    default = estimate_memory(inv, ["-c", "2048"], hw, LLAMA)
    assert default.host.parts.prompt_cache == 8192 * MIB
    off = estimate_memory(inv, ["-c", "2048", "-cram", "0"], hw, LLAMA)
    assert off.host.parts.prompt_cache == 0
    unlimited = estimate_memory(inv, ["-c", "2048", "--cache-ram", "-1"], hw, LLAMA)
    assert unlimited.host.parts.prompt_cache == unlimited.host.parts.kv


def test_env_is_read_and_argv_wins() -> None:
    s = read_settings(LLAMA, ["-c", "1024"], ["LLAMA_ARG_CTX_SIZE=9999", "LLAMA_ARG_N_PARALLEL=2"])
    assert (s.ctx, s.parallel) == (1024, 2)
    s = read_settings(LLAMA, [], ["LLAMA_ARG_KV_UNIFIED=0", "LLAMA_ARG_SWA_FULL=1"])
    assert (s.kv_unified, s.swa_full) == (False, True)


def test_cache_types_and_flash_attention() -> None:
    inv = llama_135m()
    hw = cpu_host()
    f16 = estimate_memory(inv, ["-c", "8192"], hw, LLAMA).host.parts.kv
    q8 = estimate_memory(inv, ["-c", "8192", "-ctk", "q8_0", "-ctv", "q8_0"], hw, LLAMA)
    assert q8.host.parts.kv == f16 * 34 // 64
    no_fa = estimate_memory(inv, ["-c", "8192", "-fa", "off"], hw, LLAMA)
    fa = estimate_memory(inv, ["-c", "8192", "-fa", "on"], hw, LLAMA)
    assert no_fa.host.reserved_parts.compute > fa.host.reserved_parts.compute


def test_gpu_placement_moves_layers_and_output() -> None:
    inv = llama_135m()
    hw = gpu_host(8 << 30, 8 << 30)
    full = estimate_memory(inv, ["-c", "2048"], hw, LLAMA)
    assert [d.name for d in full.devices] == ["Vulkan0", "Vulkan1"]
    blocks = sum(t.size for t in inv.tensors if t.layer is not None)
    assert sum(d.parts.weights for d in full.devices) == blocks + 2560  # + output_norm
    assert full.host.parts.weights == 33_000_000  # token_embd stays on the host
    assert full.host.parts.kv == 0
    cpu = estimate_memory(inv, ["-c", "2048", "-ngl", "0"], hw, LLAMA)
    assert sum(d.total for d in cpu.devices) == 0
    assert cpu.host.parts.weights == inv.tensor_bytes
    nkvo = estimate_memory(inv, ["-c", "2048", "-nkvo"], hw, LLAMA)
    assert nkvo.host.parts.kv == full.devices[0].parts.kv + full.devices[1].parts.kv
    one = estimate_memory(inv, ["-c", "2048", "-ts", "1,0"], hw, LLAMA)
    assert one.devices[1].parts.weights == 0


def test_override_tensor_and_cpu_moe() -> None:
    inv = llama_135m()
    hw = gpu_host(8 << 30)
    ot = estimate_memory(inv, ["-c", "2048", "-ot", r"blk\.(0|1)\.ffn_up=CPU"], hw, LLAMA)
    moved = sum(
        t.size for t in inv.tensors if t.name in ("blk.0.ffn_up.weight", "blk.1.ffn_up.weight")
    )
    assert ot.host.parts.weights == 33_000_000 + moved


def test_measurement_replaces_reserved_figures() -> None:
    inv = gemma3_270m()
    args = ["--model", "/m/gemma.gguf", "-c", "4096", "-np", "1", "--port", "1"]
    settings = memory_settings(LLAMA, args)
    assert settings == ("--ctx-size", "4096", "--parallel", "1")
    row = FitRow(name="Host", model=222 * MIB, context=27 * MIB, compute=514 * MIB)
    m = FitMeasurement(model="/other/gemma.gguf", settings=settings, ctx=4096, host=row)
    hw = cpu_host()
    hw2 = type(hw)(cpu=hw.cpu, executors=hw.executors, measurements=(m,))
    assert matching_measurement(hw2, LLAMA, "/m/gemma.gguf", args) == m
    assert matching_measurement(hw2, LLAMA, "/m/gemma.gguf", ("-c", "8192")) is None
    est = estimate_memory(inv, args, hw, LLAMA)
    got = with_measurement(est, m)
    assert got.source == "measured"
    assert got.host.reserved_parts.weights == 222 * MIB
    assert got.host.reserved == (222 + 27 + 514) * MIB + est.host.parts.prompt_cache
    assert got.host.total == est.host.total  # the resident peak stays estimated


def test_fitter_off_flags() -> None:
    assert fitter_off(read_settings(LLAMA, ["-c", "1"])) == ()
    got = fitter_off(
        read_settings(LLAMA, ["-ngl", "9", "-ts", "1,1", "-ot", "x=CPU", "-sm", "row"])
    )
    assert got == ("-ngl", "-ts", "-ot", "--split-mode row")


def test_explain_shows_the_arithmetic() -> None:
    m = estimate_memory(llama_135m(), ["-c", "2048", "-cram", "512"], cpu_host(), LLAMA)
    (line,) = explain_memory(m)
    assert line.startswith("ctx 2048: Host (resident, estimated): weights ")
    assert "+ prompt cache 512 MiB" in line
    assert "reserves" not in line  # the host is judged by its resident figure alone
    assert "<= 20 GiB usable" in line


def test_deterministic() -> None:
    args = ["-c", "4096", "-ngl", "7"]
    hw = gpu_host(4 << 30)
    assert estimate_memory(gemma3_270m(), args, hw, LLAMA) == estimate_memory(
        gemma3_270m(), args, hw, LLAMA
    )


def _fit_params(binary: str, model: Path, args: list[str]) -> tuple[int, int, int]:
    out = subprocess.run(
        [binary, "--model", str(model), *args, "--fit-print", "on"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    model_mib, context_mib, compute_mib = (int(x) for x in out[-3:])
    return model_mib, context_mib, compute_mib


@pytest.mark.parametrize(
    ("args", "tiny_too"),
    [
        (["-c", "512", "-np", "1"], True),
        (["-c", "4096", "-np", "4"], True),
        (["-c", "32768", "-np", "1", "-fa", "off"], True),
        (["-c", "8192", "-np", "2", "-ub", "64"], True),
        # the tiny model's 8-wide heads cannot hold a quantized cache: the executor refuses
        (["-c", "8192", "-np", "2", "-ctk", "q8_0", "-ctv", "q8_0"], False),
    ],
)
def test_reserved_agrees_with_llama_fit_params(
    args: list[str], tiny_too: bool, tiny_llama: Path, real_model: Path
) -> None:
    # The engine's own answer, from a no-allocation load: within 10 % (or 32 MiB for models
    # under 300 MiB), part by part.
    binary = _executor("llama-fit-params")
    for model in (tiny_llama, real_model) if tiny_too else (real_model,):
        inv = read_inventory(model).unwrap()
        got = estimate_memory(inv, args, cpu_host(), LLAMA).host.reserved_parts
        want = _fit_params(binary, model, args)
        for ours, theirs in zip((got.weights, got.kv, got.compute), want, strict=True):
            assert abs(ours / MIB - theirs) <= max(32, theirs / 10), (model.name, args, got, want)


def test_projector_and_draft_add_their_bytes() -> None:
    main, side = gemma3_270m(), llama_135m()
    hw = cpu_host()
    args = ["-c", "4096", "-np", "1"]
    alone = estimate_memory(main, args, hw, LLAMA).host
    with_mmproj = estimate_memory(main, args, hw, LLAMA, mmproj=side).host
    assert with_mmproj.parts.weights - alone.parts.weights == side.tensor_bytes
    with_draft = estimate_memory(main, args, hw, LLAMA, draft=side).host
    assert with_draft.parts.weights - alone.parts.weights == side.tensor_bytes
    assert with_draft.parts.kv > alone.parts.kv  # the draft keeps its own cache
    assert with_draft.parts.other == alone.parts.other  # one process, one fixed overhead
