"""Issue 18, items 5 to 9: expected failures are one line and the right exit, never a
traceback, a silent misreading or a start that is known to fail."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exedra_engine.cli import exit_status
from exedra_engine.errors import (
    ConfigError,
    EmitError,
    EngineError,
    HardwareFileError,
    LaunchError,
    NotReady,
    PlanError,
)
from tests.conftest import FAKE, Run

PLAN = ["--kind", "llama", "--no-config", "--executor", str(FAKE)]


def _one_line_error(code: int, err: str, *, exit: int = 2) -> None:
    assert code == exit, err
    assert err.count("\n") == 1 and err.startswith("exedra-engine"), err
    assert "Traceback" not in err


@pytest.mark.parametrize("value", ["-5", "0", "nan", "inf", "x"])
@pytest.mark.parametrize("option", ["--ready-timeout", "--stop-timeout"])
def test_launch_timeouts_refused_at_parse(
    option: str, value: str, tiny_llama: Path, run: Run
) -> None:
    r = run("launch", "--model", str(tiny_llama), *PLAN, f"{option}={value}")
    _one_line_error(r.code, r.err)
    assert f"argument {option}:" in r.err


@pytest.mark.parametrize("how", ["existing file", "missing parent", "directory in the way"])
@pytest.mark.parametrize("via", ["emit", "plan --emit"])
def test_emit_out_path_checked(how: str, via: str, tmp_path: Path, run: Run) -> None:
    model = "/srv/models/m.gguf"
    plan = ["plan", "--model", model, *PLAN, "--host", "0.0.0.0", "--port", "8080"]
    r = run(*plan, "--json")
    assert r.code == 0, r.err
    saved = tmp_path / "plan.json"
    saved.write_text(r.out)
    out = tmp_path / "out"
    if how == "existing file":
        out.write_text("keep me")
    elif how == "missing parent":
        out = tmp_path / "nope" / "out"
    else:  # the file to be written is a directory
        r = run("emit", str(saved), "--target", "k8s", "--out", str(out))
        assert r.code == 0, r.err
        written = sorted(out.iterdir())
        for f in written:
            f.unlink()
            f.mkdir()
    argv = ["emit", str(saved), "--target", "k8s"] if via == "emit" else [*plan, "--emit", "k8s"]
    r = run(*argv, "--out", str(out))
    _one_line_error(r.code, r.err)
    assert f"--out {out}" in r.err
    if how == "existing file":
        assert out.read_text() == "keep me"
    if how == "missing parent":
        assert not out.parent.exists()


def test_launch_missing_model_exits_2_before_starting(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fake executor would write this file if it were started.
    monkeypatch.setenv("FAKE_READY_FILE", str(tmp_path / "started"))
    for model in ("/nope/m.gguf", str(tmp_path)):
        t = time.monotonic()
        r = run("launch", "--model", model, *PLAN)
        _one_line_error(r.code, r.err)
        assert "launch needs the model file" in r.err
        assert time.monotonic() - t < 1.0
    assert not (tmp_path / "started").exists()


@pytest.mark.parametrize("reader", ["head -1", "true"])
@pytest.mark.parametrize("command", ["plan", "probe"])
def test_a_pipe_closed_after_output_exits_0(command: str, reader: str, tiny_llama: Path) -> None:
    argv = ["plan", "--model", str(tiny_llama), *PLAN] if command == "plan" else ["probe"]
    script = (
        "set -o pipefail; "
        + " ".join([sys.executable, "-m", "exedra_engine", *argv])
        + f" | {reader} > /dev/null"
    )
    # `| true` may exit before the first write: retried, so that the closed pipe is met.
    for _ in range(3):
        r = subprocess.run(
            ["bash", "-c", script], check=False, capture_output=True, text=True, timeout=60
        )
        assert (r.returncode, r.stderr) == (0, ""), r.stderr


def test_wait_ready_waits_its_timeout_and_says_how_long(run: Run) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # at 0 and 1 s, then at the deadline: the last attempt is not given up an interval early
    for timeout, interval, attempts in ((1.5, 1.0, 3), (0.5, 1.0, 2)):
        t = time.monotonic()
        r = run(
            "wait-ready",
            f"--timeout={timeout}",
            f"--interval={interval}",
            f"http://127.0.0.1:{port}/health",
        )
        took = time.monotonic() - t
        _one_line_error(r.code, r.err, exit=1)
        assert timeout <= took < timeout + 0.5, took
        said = float(r.err.split(" did not answer 200 in ")[1].split(" s ")[0])
        assert abs(said - took) < 0.2, (said, took)
        assert f"{attempts} attempts" in r.err


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
@pytest.mark.parametrize("option", ["--timeout", "--interval"])
def test_wait_ready_values_refused(option: str, value: str, run: Run) -> None:
    r = run("wait-ready", f"{option}={value}", "http://127.0.0.1:1/health")
    _one_line_error(r.code, r.err)
    assert f"argument {option}:" in r.err


@pytest.mark.parametrize("command", ["plan", "launch"])
def test_executor_kind_equals_path_and_directory_refused(
    command: str, tiny_llama: Path, tmp_path: Path, run: Run
) -> None:
    base = [command, "--model", str(tiny_llama), "--kind", "llama", "--no-config"]
    r = run(*base, "--executor", f"llama={FAKE}")
    _one_line_error(r.code, r.err)
    assert f"write --executor {FAKE}" in r.err
    r = run(*base, "--executor", str(tmp_path))
    _one_line_error(r.code, r.err)
    assert "is a directory" in r.err
    # A file whose name holds '=' is still a path.
    odd = tmp_path / "llama=odd"
    odd.write_text("")
    if command == "plan":
        r = run(*base, "--executor", str(odd), "--json")
        assert r.code == 0 and f'"command": "{odd}"' in r.out, r.err


def test_the_property_covers_launch_and_emit() -> None:
    from properties.test_cli_props import NUMERIC

    covered = {(c[0], o) for c, o, _ in NUMERIC}
    assert ("launch", "--ready-timeout") in covered and ("emit", "--stop-timeout") in covered
    assert os.path.exists(Path(__file__).parents[2] / "properties" / "test_cli_props.py")


@pytest.mark.parametrize("where", ["a directory", "a missing directory"])
def test_launch_log_file_path_checked(
    where: str, tiny_llama: Path, tmp_path: Path, run: Run
) -> None:
    path = tmp_path if where == "a directory" else tmp_path / "nope" / "x.log"
    r = run("launch", "--model", str(tiny_llama), *PLAN, "--log-file", str(path))
    _one_line_error(r.code, r.err)
    assert "argument --log-file:" in r.err


# -- one table of exit statuses ---------------------------------------------------------

MODEL = "/var/lib/exedra/models/qwen/model.gguf"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (NotReady("never answered"), 1),
        (LaunchError("cannot start"), 1),
        (ConfigError("bad file"), 2),
        (HardwareFileError("bad host"), 2),
        (PlanError("bad plan"), 2),
        (EmitError("loopback in a pod"), 2),
        (EngineError("bad option"), 2),
    ],
)
def test_one_table_maps_error_classes_to_exit_status(error: EngineError, status: int) -> None:
    assert exit_status(error) == status


def test_errors_reach_main_with_their_status(tmp_path: Path, run: Run) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("env: [not, a, mapping]\n")
    r = run("plan", "--model", MODEL, "--kind", "llama", "--config", str(bad))
    assert r.code == 2 and r.err.count("\n") == 1 and "bad.yaml:1" in r.err
    r = run("emit", str(tmp_path / "missing.json"), "--target", "k8s")
    assert r.code == 2 and "cannot read" in r.err
