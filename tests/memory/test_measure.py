"""The engine's own measurement (issue 19 item 3): llama-fit-params' figures parsed purely,
the plan's memory flags chosen from the flag table, and the real binary run on real models."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._core.host.hardware_file import hardware_from_json
from exedra_engine._core.memory.fit_params import (
    FitMeasurement,
    FitRow,
    MiB,
    companion_args,
    ctx_from_log,
    device_free_from_log,
    measurement_for,
    measurement_from,
    memory_settings,
    rows_from_print,
)
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.values import Hardware
from exedra_engine._shell.measure import find_companion, measure_model, run_bounded
from exedra_engine._shell.plan import PlanRequest
from exedra_engine.errors import MeasureError, PlanError
from tests.conftest import Run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "fit-params"


def _all(_: str) -> bool:
    return True


def test_rows_of_a_gpu_host() -> None:
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
def test_what_is_not_its_figures_is_a_typed_error(text: str, said: str) -> None:
    with pytest.raises(MeasureError, match=said):
        rows_from_print(text)


def test_the_log_says_context_and_free_device_memory() -> None:
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


def test_the_plans_memory_settings_canonical() -> None:
    args = (
        "--model", "/m.gguf", "--host", "127.0.0.1", "--port", "8080", "-c", "8192",
        "--no-webui", "-ctk", "q8_0", "--cache-ram", "0", "-nkvo", "--mmproj", "/p.gguf",
        "--ubatch-size=64",
    )  # fmt: skip
    assert memory_settings(LLAMA, args) == (
        "--ctx-size", "8192", "--cache-type-k", "q8_0", "--cache-ram", "0", "--no-kv-offload",
        "--mmproj", "/p.gguf", "--ubatch-size", "64", "--kv-unified", "--parallel", "4",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "env", "slots"),
    [
        ((), (), ("--kv-unified", "--parallel", "4")),  # llama-server's auto: 4 slots, 1 cache
        (("-np", "-1"), (), ("--kv-unified", "--parallel", "4")),
        (("-np", "4", "-kvu"), (), ("--kv-unified", "--parallel", "4")),
        (("-np", "2"), (), ("--parallel", "2")),  # explicit slots: a cache each
        (("-np", "2", "--no-kv-unified"), (), ("--parallel", "2")),
        ((), ("LLAMA_ARG_N_PARALLEL=3",), ("--parallel", "3")),
        ((), ("LLAMA_ARG_N_PARALLEL=-1",), ("--kv-unified", "--parallel", "4")),
        (
            (),
            ("LLAMA_ARG_N_PARALLEL=3", "LLAMA_ARG_KV_UNIFIED=1"),
            ("--kv-unified", "--parallel", "3"),
        ),
    ],
)
def test_the_automatic_slot_count_is_made_explicit(
    args: tuple[str, ...], env: tuple[str, ...], slots: tuple[str, ...]
) -> None:
    assert memory_settings(LLAMA, args, env)[-len(slots) :] == slots


def test_the_companion_gets_what_it_takes() -> None:
    settings = memory_settings(LLAMA, ("-c", "8192", "--cache-ram", "0", "-ctk", "q8_0"))
    no_server_flags = {"--cache-ram", "--kv-unified", "--mmproj"}

    def takes(k: str) -> bool:
        return k not in no_server_flags

    # a unified cache of 4 slots is measured as one cache of the whole context: one slot
    assert companion_args(LLAMA, settings, accepts=takes) == (
        "--ctx-size", "8192", "--cache-type-k", "q8_0", "--parallel", "1",
    )  # fmt: skip
    split = memory_settings(LLAMA, ("-c", "8192", "-np", "2"))
    assert companion_args(LLAMA, split, accepts=takes) == ("--ctx-size", "8192", "--parallel", "2")
    # a companion that knows --kv-unified is told everything as it is
    assert companion_args(LLAMA, settings, accepts=_all) == settings


def test_the_plans_variables_become_flags() -> None:
    env = (
        "LLAMA_ARG_CTX_SIZE=4096",
        "LLAMA_ARG_FLASH_ATTN=on",
        "LLAMA_ARG_HOST=0.0.0.0",
        "LLAMA_API_KEY=secret",
    )
    got = memory_settings(LLAMA, ("-c", "512"), env)
    # the flag in argv wins over its variable, as in the executor
    assert got == ("--ctx-size", "512", "--flash-attn", "on", "--kv-unified", "--parallel", "4")
    assert "secret" not in " ".join(got)


def test_an_argv_the_table_cannot_cut_is_a_plan_error() -> None:
    with pytest.raises(PlanError):
        memory_settings(LLAMA, ("-c",))


def test_a_measurement_is_found_only_for_the_same_settings() -> None:
    def made(*args: str) -> FitMeasurement:
        host = FitRow(name="Host", model=1, context=2, compute=3)
        settings = memory_settings(LLAMA, args)
        return FitMeasurement(model="/m.gguf", settings=settings, ctx=4096, host=host)

    at_4k = made("-c", "4096", "--cache-ram", "0")
    at_8k = made("-c", "8192")
    ms = (at_4k, at_8k)
    # another spelling, another order, other flags that change no reservation: the same
    plan = ("--port", "8080", "--cache-ram", "0", "-c", "4096", "--no-webui")
    assert measurement_for(ms, LLAMA, "/m.gguf", plan) is at_4k
    assert measurement_for(ms, LLAMA, "/m.gguf", ("-np", "-1", "-c", "8192")) is at_8k
    assert measurement_for(ms, LLAMA, "/m.gguf", ("-c", "8192", "-np", "4")) is None  # 4 caches
    assert measurement_for(ms, LLAMA, "/m.gguf", ("-c", "4096")) is None  # cache-ram differs
    assert measurement_for(ms, LLAMA, "/other.gguf", plan) is None
    # the target's file, planned from a path of another machine: matched by its name
    assert measurement_for(ms, LLAMA, "/srv/models/m.gguf", plan) is at_4k
    here = msgspec.structs.replace(at_4k, model="/srv/models/m.gguf", build="newer")
    assert measurement_for((here, *ms), LLAMA, "/srv/models/m.gguf", plan) is here
    assert measurement_for((*ms, here), LLAMA, "/m.gguf", plan) is at_4k  # its own path first


# -- captured real output ------------------------------------------------------------------


def test_captured_output_of_the_real_binary() -> None:
    stdout = (FIXTURES / "gemma3-gen-8192.stdout").read_text()
    log = (FIXTURES / "gemma3-gen-8192.log").read_text()
    devices, host = rows_from_print(stdout)
    assert devices == ()
    assert (host.model, host.context, host.compute) == (98 * MiB, 13 * MiB, 64 * MiB)
    assert ctx_from_log(log) == 8192
    assert device_free_from_log(log) == {}  # a CPU-only load names no device
    m = measurement_from(stdout, log, model="g.gguf", args=(), ctx=0, host_free=5 * MiB)
    assert m.ctx == 8192 and m.host.total == 175 * MiB and m.host.free == 5 * MiB
    _, moe = rows_from_print((FIXTURES / "qwen3moe-gen-default.stdout").read_text())
    assert moe.total == (51 + 73 + 63) * MiB


# -- the real binary -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def gen_gemma3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from exedra_engine.testing import write_arch_model

    return write_arch_model(tmp_path_factory.mktemp("measure") / "gemma3.gguf", "gemma3")


def test_the_real_binary_gives_the_captured_figures(fit_params: str, gen_gemma3: Path) -> None:
    m = measure_model(LLAMA, str(gen_gemma3), ("-c", "8192"), binary=fit_params)
    want = measurement_from(
        (FIXTURES / "gemma3-gen-8192.stdout").read_text(),
        (FIXTURES / "gemma3-gen-8192.log").read_text(),
        model=str(gen_gemma3),
        args=("--ctx-size", "8192", "--parallel", "1"),
        settings=("--ctx-size", "8192", "--kv-unified", "--parallel", "4"),
        ctx=0,
        build=m.build,
    )
    assert m == want
    assert m.build.startswith("0.") or "build" in m.build


def test_figures_follow_the_plans_flags(fit_params: str, gen_gemma3: Path) -> None:
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
    assert m.ctx == 32768 and m.args == ("--parallel", "1")
    assert m.settings == ("--cache-ram", "0", "--kv-unified", "--parallel", "4")


def test_a_failing_companion_is_a_typed_error(
    fit_params: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(MeasureError, match="failed"):
        measure_model(LLAMA, str(bad), binary=fit_params)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(MeasureError, match="is not installed"):
        find_companion(LLAMA, str(tmp_path / "nowhere" / "llama-server"))


def test_runs_are_bounded_in_time_and_output() -> None:
    with pytest.raises(MeasureError, match=r"did not finish within 0\.3 s"):
        run_bounded(["sleep", "30"], {}, 0.3)
    with pytest.raises(MeasureError, match="printed more than"):
        run_bounded(["yes"], {}, 30)
    with pytest.raises(MeasureError, match="cannot be run"):
        run_bounded(["/nonexistent/llama-fit-params"], {}, 1)
    out, log = run_bounded(["sh", "-c", "echo Host 1 2 3; echo oops >&2; exit 0"], {}, 5)
    assert out == "Host 1 2 3\n" and log == "oops"


def test_the_companion_is_found_beside_the_executor(
    fit_params: str, llama_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert os.path.samefile(find_companion(LLAMA, llama_server), fit_params)


# -- the command line ----------------------------------------------------------------------


def test_plan_measure_puts_the_measurement_into_the_planners_input(
    run: Run, gen_gemma3: Path, llama_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import exedra_engine.cli.plan.request as asked  # where the CLI asks the planner

    seen: list[Hardware] = []
    real = asked.explain_request

    def spy(req: PlanRequest, *a: Any, **kw: Any) -> Any:
        assert req.hardware is not None
        seen.append(req.hardware)
        return real(req, *a, **kw)

    monkeypatch.setattr(asked, "explain_request", spy)
    argv = ["plan", "--model", str(gen_gemma3), "--kind", "llama", "--no-config"]
    argv += ["--executor", llama_server, "--ctx", "1024", "--no-port-check", "--json"]
    r = run(*argv, "--measure")
    assert r.code == 0, r.err
    # planned once for its flags (no measurement yet), then with the engine's own figures
    # (again with the executor's devices and the build's weight copies, where they differ)
    assert [len(hw.measurements) for hw in seen][:2] == [0, 1]
    assert all(len(hw.measurements) == 1 for hw in seen[1:])
    m = seen[-1].measurements[0]
    assert m.model == str(gen_gemma3) and m.ctx == 1024
    assert m.args == (
        "--ctx-size", "1024", "--n-gpu-layers", "0", "--parallel", "1",
        "--override-kv", "gemma3.attention.sliding_window=int:2048",
    )  # fmt: skip
    assert m.host.model > 0 and m.host.context > 0 and m.build
    plan = msgspec.json.decode(r.out, type=LaunchPlan)
    assert measurement_for(seen[-1].measurements, LLAMA, plan.spec.path, plan.args, plan.env) is m
    # the plan holds the engine's own reserved figures
    assert plan.memory is not None and plan.memory.source == "measured"
    assert plan.memory.host.reserved_parts.kv == m.host.context
    assert plan.memory.host.reserved_parts.compute == m.host.compute
    seen.clear()
    assert run(*argv).code == 0
    # without --measure: no llama-fit-params figures (the build's weight copies, read by a
    # short load of their own, are planned again with: tests/memory/test_build_buffers.py)
    assert seen and all(not hw.measurements for hw in seen)


def test_measure_here_is_refused_with_a_hardware_file(
    run: Run, gen_gemma3: Path, tmp_path: Path
) -> None:
    f = tmp_path / "host.json"
    f.write_text('{"cpu": {"threads": 4}}')
    r = run(
        "plan", "--model", str(gen_gemma3), "--kind", "llama", "--no-config",
        "--hardware", str(f), "--measure",
    )  # fmt: skip
    assert r.code == 2 and "--measure measures on this machine" in r.err


def test_probe_measure_stores_figures_a_plan_elsewhere_uses(
    run: Run,
    gen_gemma3: Path,
    llama_server: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", f"{os.path.dirname(llama_server)}:{os.environ['PATH']}")
    r = run("probe", "--json", "--measure", str(gen_gemma3), "--ctx", "512", "--ctx", "2048")
    assert r.code == 0, r.err
    host_file = tmp_path / "host.json"
    host_file.write_text(r.out)
    hw = hardware_from_json(r.out, "host.json")
    assert [m.ctx for m in hw.measurements] == [512, 2048]
    assert hw.measurements[0].host.context < hw.measurements[1].host.context
    text = run("probe", "--measure", str(gen_gemma3), "--ctx", "512")
    assert text.code == 0 and "measured" in text.out and "ctx 512" in text.out
    # planned from the file on "another machine": the measurement travels with it
    import exedra_engine.cli.plan.request as asked  # where the CLI asks the planner

    seen: list[Hardware] = []
    real = asked.explain_request

    def spy(req: PlanRequest, *a: Any, **kw: Any) -> Any:
        assert req.hardware is not None
        seen.append(req.hardware)
        return real(req, *a, **kw)

    monkeypatch.setattr(asked, "explain_request", spy)
    p = run(
        "plan", "--model", str(gen_gemma3), "--kind", "llama", "--no-config", "--ctx", "2048",
        "--hardware", str(host_file), "--no-port-check", "--json",
    )  # fmt: skip
    assert p.code == 0, p.err
    plan = msgspec.json.decode(p.out, type=LaunchPlan)
    found = measurement_for(seen[0].measurements, LLAMA, plan.spec.path, plan.args, plan.env)
    assert found == hw.measurements[1]
    assert plan.memory is not None and plan.memory.source == "measured"
    assert run("probe", "--ctx", "512").code == 2  # --ctx without --measure


def test_a_shared_cache_keeps_a_window_per_slot() -> None:
    settings = memory_settings(LLAMA, ("-c", "8192"))
    no_unified = {"--kv-unified"}

    def takes(k: str) -> bool:
        return k not in no_unified

    got = companion_args(LLAMA, settings, accepts=takes, arch="gemma3", window=512)
    # 4 slots in one cache: 4 windows of 512, as one slot with a window of 2048
    assert got == (
        "--ctx-size", "8192", "--parallel", "1",
        "--override-kv", "gemma3.attention.sliding_window=int:2048",
    )  # fmt: skip
    split = memory_settings(LLAMA, ("-c", "8192", "-np", "4"))  # a cache per slot: as it is
    assert companion_args(LLAMA, split, accepts=takes, arch="gemma3", window=512) == (
        "--ctx-size", "8192", "--parallel", "4",
    )  # fmt: skip
    assert "--override-kv" not in companion_args(LLAMA, settings, accepts=takes, arch="llama")


def test_real_gemma_measured_as_the_server_reserves_its_kv(
    fit_params: str, real_model: Path
) -> None:
    # llama-server -c 8192 (4 slots, one cache) logs KV 24.00 + 37.50 MiB for this model
    from exedra_engine._shell.inspect import read_inventory

    inv = read_inventory(real_model).unwrap()
    m = measure_model(
        LLAMA, str(real_model), ("-c", "8192"), binary=fit_params,
        arch=inv.architecture, window=inv.sliding_window,
    )  # fmt: skip
    assert m.host.context == 61 * MiB  # 61.5 MiB, rounded down by the engine
    assert m.args[-2:] == ("--override-kv", "gemma3.attention.sliding_window=int:2048")
