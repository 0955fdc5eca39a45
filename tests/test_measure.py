"""The engine's own measurement (issue 19 item 3): llama-fit-params' figures parsed purely,
the plan's memory flags chosen from the flag table, and the real binary run on real models."""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from exedra_engine._core.executors import LLAMA
from exedra_engine._core.fit_params import (
    FitMeasurement,
    FitRow,
    MiB,
    ctx_from_log,
    device_free_from_log,
    measure_args,
    measurement_for,
    measurement_from,
    rows_from_print,
    split_memory_args,
)
from exedra_engine._shell.measure import find_companion, measure_model, run_bounded
from exedra_engine.errors import MeasureError, PlanError

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "fit-params"


def _all(_: str) -> bool:
    return True


def test_i19_item3_rows_of_a_gpu_host() -> None:
    # common/fit.cpp common_fit_print: "%s %zu %zu %zu \n" per device, then Host
    devices, host = rows_from_print("CUDA0 17904 384 898 \nCUDA1 1200 64 100 \nHost 355 0 12 \n")
    assert devices == (
        FitRow(name="CUDA0", model=17904 * MiB, context=384 * MiB, compute=898 * MiB),
        FitRow(name="CUDA1", model=1200 * MiB, context=64 * MiB, compute=100 * MiB),
    )
    assert host == FitRow(name="Host", model=355 * MiB, context=0, compute=12 * MiB)
    assert devices[0].total == (17904 + 384 + 898) * MiB


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "no Host row"),
        ("CUDA0 1 2 3\n", "no Host row"),
        ("Host 1 2 3\nCUDA0 1 2 3\n", "after the Host row"),
        ("Host 1 2\n", "not 'DEVICE model context compute'"),
        ("Host 1 2 -3\n", "not 'DEVICE model context compute'"),
        ("-c 4096 -ngl 99\n", "not 'DEVICE model context compute'"),  # the fitting mode's output
        ("Host 1 2 99999999999999999999\n", "not 'DEVICE model context compute'"),
        ("".join(f"D{i} 1 1 1\n" for i in range(65)) + "Host 1 1 1\n", "more than 64 rows"),
    ],
)
def test_i19_item3_what_is_not_its_figures_is_a_typed_error(text: str, said: str) -> None:
    with pytest.raises(MeasureError, match=said):
        rows_from_print(text)


def test_i19_item3_the_log_says_context_and_free_device_memory() -> None:
    log = (
        "llama_model_load_from_file_impl: using device CUDA0 (NVIDIA GeForce RTX 4090) "
        "(0000:01:00.0) - 23000 MiB free\n"
        "llama_context: n_ctx         = 8192\n"
        "llama_context: n_ctx_seq     = 2048\n"
    )
    assert device_free_from_log(log) == {"CUDA0": 23000 * MiB}
    assert ctx_from_log(log) == 8192
    assert ctx_from_log("nothing") is None
    m = measurement_from(
        "CUDA0 100 10 20\nHost 5 0 1\n",
        log,
        model="/m.gguf",
        args=("--ctx-size", "8192"),
        ctx=4096,
        build="b1",
        host_free=3 * MiB,
    )
    assert m.ctx == 8192  # the engine's word beats what was asked
    assert m.devices[0].free == 23000 * MiB
    assert m.host.free == 3 * MiB
    assert measurement_from("Host 5 0 1\n", "", model="/m", args=(), ctx=4096).ctx == 4096


def test_i19_item3_only_measure_flags_the_companion_takes_are_passed() -> None:
    args = (
        "--model", "/m.gguf", "--host", "127.0.0.1", "--port", "8080", "-c", "8192",
        "--no-webui", "-ctk", "q8_0", "--cache-ram", "0", "-nkvo", "--mmproj", "/p.gguf",
        "--ubatch-size=64",
    )  # fmt: skip
    server_only = {"--cache-ram", "--mmproj", "--kv-unified"}
    got = measure_args(LLAMA, args, accepts=lambda k: k not in server_only)
    assert got == (
        "--ctx-size", "8192", "--cache-type-k", "q8_0", "--no-kv-offload",
        "--ubatch-size", "64", "--parallel", "4",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "env", "slots"),
    [
        ((), (), ("--parallel", "4")),  # llama-server's auto: 4 slots
        (("-np", "-1"), (), ("--parallel", "4")),
        (("-np", "2"), (), ("--parallel", "2")),
        ((), ("LLAMA_ARG_N_PARALLEL=3",), ("--parallel", "3")),
        ((), ("LLAMA_ARG_N_PARALLEL=-1",), ("--parallel", "4")),
    ],
)
def test_i19_item3_the_automatic_slot_count_is_made_explicit(
    args: tuple[str, ...], env: tuple[str, ...], slots: tuple[str, ...]
) -> None:
    assert measure_args(LLAMA, args, env, accepts=_all)[-2:] == slots
    assert "--parallel" not in measure_args(LLAMA, args, env, accepts=lambda k: k != "--parallel")


def test_i19_item3_the_plans_variables_become_flags() -> None:
    env = (
        "LLAMA_ARG_CTX_SIZE=4096",
        "LLAMA_ARG_KV_UNIFIED=1",
        "LLAMA_ARG_HOST=0.0.0.0",
        "LLAMA_API_KEY=secret",
    )
    got = measure_args(LLAMA, ("-c", "512"), env, accepts=_all)
    # the flag in argv wins over its variable, as in the executor
    assert got == ("--ctx-size", "512", "--kv-unified", "--parallel", "4")
    assert "secret" not in " ".join(got)


def test_i19_item3_an_argv_the_table_cannot_cut_is_a_plan_error() -> None:
    with pytest.raises(PlanError):
        measure_args(LLAMA, ("-c",), accepts=_all)


def test_i19_item3_what_the_companion_cannot_take_is_recorded_beside() -> None:
    args = ("-c", "8192", "--cache-ram", "0", "--kv-unified", "-ctk", "q8_0")
    server_only = {"--cache-ram", "--kv-unified"}
    passed, omitted = split_memory_args(LLAMA, args, accepts=lambda k: k not in server_only)
    assert passed == ("--ctx-size", "8192", "--cache-type-k", "q8_0", "--parallel", "4")
    assert omitted == ("--cache-ram", "0", "--kv-unified")


def test_i19_item3_a_measurement_is_found_only_for_the_same_measure_flags() -> None:
    def made(args: tuple[str, ...], omitted: tuple[str, ...] = ()) -> FitMeasurement:
        host = FitRow(name="Host", model=1, context=2, compute=3)
        return FitMeasurement(model="/m.gguf", args=args, omitted=omitted, ctx=4096, host=host)

    at_4k = made(("--ctx-size", "4096", "--parallel", "4"), ("--cache-ram", "0"))
    at_8k = made(("--ctx-size", "8192", "--parallel", "4"))
    ms = (at_4k, at_8k)
    # another spelling, another order, other flags that change no reservation: the same
    plan = ("--port", "8080", "--cache-ram", "0", "-c", "4096", "--no-webui")
    assert measurement_for(ms, LLAMA, "/m.gguf", plan) is at_4k
    assert measurement_for(ms, LLAMA, "/m.gguf", ("-c", "8192", "-np", "-1")) is at_8k
    assert measurement_for(ms, LLAMA, "/m.gguf", ("-c", "8192", "-np", "2")) is None
    assert measurement_for(ms, LLAMA, "/m.gguf", ("-c", "4096")) is None  # cache-ram differs
    assert measurement_for(ms, LLAMA, "/other.gguf", plan) is None
    # the target's file, planned from a path of another machine: matched by its name
    assert measurement_for(ms, LLAMA, "/srv/models/m.gguf", plan) is at_4k
    here = msgspec.structs.replace(at_4k, model="/srv/models/m.gguf", build="newer")
    assert measurement_for((here, *ms), LLAMA, "/srv/models/m.gguf", plan) is here
    assert measurement_for((*ms, here), LLAMA, "/m.gguf", plan) is at_4k  # its own path first


# -- captured real output ------------------------------------------------------------------


def test_i19_item3_captured_output_of_the_real_binary() -> None:
    stdout = (FIXTURES / "gemma3-gen-8192.stdout").read_text()
    log = (FIXTURES / "gemma3-gen-8192.log").read_text()
    devices, host = rows_from_print(stdout)
    assert devices == ()
    assert (host.model, host.context, host.compute) == (98 * MiB, 28 * MiB, 64 * MiB)
    assert ctx_from_log(log) == 8192
    assert device_free_from_log(log) == {}  # a CPU-only load names no device
    m = measurement_from(stdout, log, model="g.gguf", args=(), ctx=0, host_free=5 * MiB)
    assert m.ctx == 8192 and m.host.total == 190 * MiB and m.host.free == 5 * MiB
    _, moe = rows_from_print((FIXTURES / "qwen3moe-gen-default.stdout").read_text())
    assert moe.total == (51 + 73 + 63) * MiB


# -- the real binary -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def gen_gemma3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from exedra_engine.testing import write_arch_model

    return write_arch_model(tmp_path_factory.mktemp("measure") / "gemma3.gguf", "gemma3")


def test_i19_item3_the_real_binary_gives_the_captured_figures(
    fit_params: str, gen_gemma3: Path
) -> None:
    m = measure_model(LLAMA, str(gen_gemma3), ("-c", "8192"), binary=fit_params)
    want = measurement_from(
        (FIXTURES / "gemma3-gen-8192.stdout").read_text(),
        (FIXTURES / "gemma3-gen-8192.log").read_text(),
        model=str(gen_gemma3),
        args=("--ctx-size", "8192", "--parallel", "4"),
        ctx=0,
        build=m.build,
    )
    assert m == want
    assert m.build.startswith("0.") or "build" in m.build


def test_i19_item3_figures_follow_the_plans_flags(fit_params: str, gen_gemma3: Path) -> None:
    def host(*args: str) -> FitRow:
        return measure_model(LLAMA, str(gen_gemma3), args, binary=fit_params).host

    small, big, full = host("-c", "2048"), host("-c", "16384"), host()
    assert small.context < big.context < full.context  # full: the model's own 32768
    assert small.model == big.model == full.model
    assert host("-c", "16384", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on").context < big.context
    assert host("-c", "2048", "-ub", "64").compute < small.compute
    m = measure_model(
        LLAMA, str(gen_gemma3), ("--cache-ram", "0", "--kv-unified"), binary=fit_params
    )
    assert m.ctx == 32768 and m.omitted == ("--cache-ram", "0", "--kv-unified")


def test_i19_item3_a_failing_companion_is_a_typed_error(fit_params: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(MeasureError, match="failed"):
        measure_model(LLAMA, str(bad), binary=fit_params)
    with pytest.raises(MeasureError, match="is not installed"):
        find_companion(LLAMA, str(tmp_path / "nowhere" / "llama-server"))


def test_i19_item3_runs_are_bounded_in_time_and_output() -> None:
    with pytest.raises(MeasureError, match=r"did not finish within 0\.3 s"):
        run_bounded(["sleep", "30"], {}, 0.3)
    with pytest.raises(MeasureError, match="printed more than"):
        run_bounded(["yes"], {}, 30)
    with pytest.raises(MeasureError, match="cannot be run"):
        run_bounded(["/nonexistent/llama-fit-params"], {}, 1)
    out, log = run_bounded(["sh", "-c", "echo Host 1 2 3; echo oops >&2; exit 0"], {}, 5)
    assert out == "Host 1 2 3\n" and log == "oops"


def test_i19_item3_the_companion_is_found_beside_the_executor(
    fit_params: str, llama_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert os.path.samefile(find_companion(LLAMA, llama_server), fit_params)
