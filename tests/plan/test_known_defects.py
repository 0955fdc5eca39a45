"""Regression tests of defects found on 2026-12-03 outside the issue's items: a thread count
ggml cannot take, a launch from another host's hardware file, a silent drain, and wording."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgspec
import psutil
import pytest
from returns.result import Failure

from exedra_engine import (
    CPU,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    ModelSpec,
    PlanError,
    plan_launch,
)
from exedra_engine._core.config.check import check_file
from exedra_engine._core.config.parse import located_config_from_yaml
from exedra_engine._shell.launch.child import ExitReason
from exedra_engine._shell.launch.instance import _drained
from exedra_engine.cli import render
from exedra_engine.constants import MAX_THREADS
from tests.conftest import Ran, Run

# -- 1. a thread count above ggml's cap -------------------------------------------------


def _hw(path: str = "/usr/bin/llama-server") -> Hardware:
    return Hardware(
        cpu=CPU(threads=8, ram=1 << 34),
        executors=(
            ExecutorInfo(kind=Kind.LLAMA, path=path),
            ExecutorInfo(kind=Kind.TRANSCRIBE, path="/usr/bin/whisper-server"),
        ),
    )


def _plan(run: Run, model: Path, tmp_path: Path, *args: str, command: str = "plan") -> Ran:
    """`exedra-engine COMMAND` for `model`, on a host file of `_hw()`, ports unchecked."""
    hw = tmp_path / "here.json"
    hw.write_bytes(msgspec.json.encode(_hw()))
    base = ("--model", str(model), "--kind", "llama", "--hardware", str(hw), "--no-port-check")
    return run(command, *base, *args)


@pytest.mark.parametrize("kind", [Kind.LLAMA, Kind.TRANSCRIBE])
def test_threads_above_ggml_cap_refused_by_the_planner(kind: Kind) -> None:
    spec = ModelSpec(path="/m/model.bin", kind=kind)
    ok = plan_launch(spec, _hw(), Constraints(threads=MAX_THREADS)).unwrap()
    assert ok.args[ok.args.index("--threads") + 1] == "512"
    for n in (MAX_THREADS + 1, 100_000):
        r = plan_launch(spec, _hw(), Constraints(threads=n))
        assert isinstance(r, Failure) and isinstance(r.failure(), PlanError)
        msg = str(r.failure())
        assert f"threads {n} (--threads)" in msg and "more than 512" in msg, msg


@pytest.fixture
def hw_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "other.json"
    path.write_bytes(msgspec.json.encode(_hw("/opt/other-host/bin/llama-server")))
    yield path


@pytest.mark.parametrize("command", ["plan", "launch"])
def test_threads_100000_is_an_input_error_on_the_command_line(
    command: str, tiny_llama: Path, tmp_path: Path, run: Run
) -> None:
    r = _plan(run, tiny_llama, tmp_path, "--threads", "100000", command=command)
    assert r.code == 2, r
    assert "threads 100000 (--threads) is more than 512" in r.err and r.err.count("\n") == 1
    assert psutil.Process().children(recursive=True) == []


def _findings(text: str) -> list[tuple[str, str, str]]:
    found = check_file(located_config_from_yaml(text, "a.yaml").unwrap())
    return [(f.code, f.path, f.message) for f in found]


def test_threads_above_ggml_cap_flagged_by_the_config_checker() -> None:
    text = (
        "env: {LLAMA_ARG_THREADS: '600'}\n"
        "engines:\n  llama:\n    args: [--threads, '100000', -tb, '1000']\n"
        "models:\n  q:\n    args: [--threads-http, '1000', -t, '512']\n"
    )
    found = _findings(text)
    bad = {path: msg for code, path, msg in found if code == "bad-value"}
    flagged = {"$.env.LLAMA_ARG_THREADS", "$.engines.llama.args[1]", "$.engines.llama.args[3]"}
    assert set(bad) == flagged, found
    assert "--threads 100000 is more than 512" in bad["$.engines.llama.args[1]"]
    assert "-tb 1000 is more than 512" in bad["$.engines.llama.args[3]"]
    assert "LLAMA_ARG_THREADS=600: " in bad["$.env.LLAMA_ARG_THREADS"]


def test_threads_above_ggml_cap_in_caller_args_fails_strict(
    tiny_llama: Path, tmp_path: Path, run: Run
) -> None:
    r = _plan(run, tiny_llama, tmp_path, "--arg=--threads", "--arg=9000", "--strict")
    assert r.code == 2 and "--threads 9000 is more than 512" in r.err, r


# -- 2. launch with another host's hardware file ---------------------------------------


def test_launch_with_another_hosts_hardware_file_is_refused_before_any_process(
    hw_file: Path, tiny_llama: Path, run: Run
) -> None:
    r = run("launch", "--model", str(tiny_llama), "--kind", "llama", "--hardware", str(hw_file))
    assert r.code == 2, r
    assert f"--hardware {hw_file}" in r.err and "/opt/other-host/bin/llama-server" in r.err
    assert "does not exist" in r.err and r.err.count("\n") == 1
    assert psutil.Process().children(recursive=True) == []
    # Planning for that host stays what the file is for.
    planned = run(
        "plan",
        "--model",
        str(tiny_llama),
        "--kind",
        "llama",
        "--hardware",
        str(hw_file),
        "--no-port-check",
        "--json",
    )
    assert planned.code == 0, planned
    assert json.loads(planned.out)["command"] == "/opt/other-host/bin/llama-server"


# -- 3. a draining stop says what it waits for -----------------------------------------


def test_drain_end_lines() -> None:
    assert _drained([2, 1, 0], True, 3.25, 30) == (
        "drained: idle after 3.2 s (2 slots busy when it began): stopping it"
    )
    assert _drained([1, 1], False, 30.0, 30) == (
        "drain: 1 slot still busy after 30 s: stopping it anyway"
    )
    assert _drained([], False, 5.0, 5) == "drain: no answer after 5 s: stopping it anyway"
    assert _drained([0], True, 0.0, 5) == "drain: no request in progress: stopping it now"
    assert _drained([None], True, 0.0, 5).startswith("drain: the executor does not say")
    assert _drained([1, None], True, 1.0, 5).startswith("drain: the executor stopped answering")


# -- 4. wording -----------------------------------------------------------------------


def test_one_emitted_file_matches_the_plan(tiny_llama: Path, tmp_path: Path, run: Run) -> None:
    r = _plan(run, tiny_llama, tmp_path, "--emit", "k8s", "--check")
    assert r.code == 0, r
    assert r.out.rstrip().endswith(".yaml matches the plan (k8s)"), r.out


def test_a_requested_stop_is_said_in_words_not_a_method_name() -> None:
    assert ExitReason(returncode=0, requested=True).describe() == "exit 0 after a stop request"
    assert ExitReason(returncode=-9, requested=True).describe() == (
        "killed by SIGKILL after a stop request"
    )
    assert ExitReason(returncode=1, requested=False).describe() == "exit 1"


def test_host_name_given_to_host_is_not_masked() -> None:
    try:
        given = {"localhost": "--host", "inference-box": "--host", "Xk9qL2vRt7": "--host"}
        render.hide_values({**given, "localhost2x": "--name"})
        said = "couldn't bind HTTP server socket, hostname: {}, port: 8080"
        assert render.unechoed(said.format("localhost")) == said.format("localhost")
        assert render.unechoed(said.format("inference-box")) == said.format("inference-box")
        # A value in a key's form stays hidden, --host or not.
        assert "Xk9qL2vRt7" not in render.unechoed(said.format("Xk9qL2vRt7"))
        assert "localhost2x" not in render.unechoed("x localhost2x y")
    finally:
        render.hide_values({})


@pytest.fixture
def readable_model(tiny_llama: Path) -> Iterator[Path]:
    """The tiny model where any user can read it: a Quadlet unit runs as 65532, and emit
    refuses a model that user cannot reach (pytest's own tmp tree is 0700)."""
    where = Path(tempfile.mkdtemp(prefix="exedra-test-", dir="/var/tmp"))
    try:
        where.chmod(0o755)
        model = where / tiny_llama.name
        shutil.copyfile(tiny_llama, model)
        model.chmod(0o644)
        yield model
    finally:
        shutil.rmtree(where)


@pytest.mark.parametrize("target", ["k8s", "quadlet"])
def test_emit_explain_prints_one_host_row(
    target: str, readable_model: Path, tmp_path: Path, run: Run
) -> None:
    r = _plan(run, readable_model, tmp_path, "--emit", target, "--explain")
    assert r.code == 0, r
    rows = [line.split() for line in r.err.splitlines() if line.startswith("  host ")]
    assert len(rows) == 1, rows
    assert rows[0][1:3] == ["0.0.0.0", "default"]
