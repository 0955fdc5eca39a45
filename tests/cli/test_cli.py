"""The command line: readable text, JSON for machines, exit 2 with one line on bad input.

Commands run in this process through `main(argv)`; only the entry points, a signal and a
closed or full stdout get a process of their own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest

from exedra_engine import LaunchPlan, __version__
from exedra_engine.cli import main
from tests.conftest import FAKE, HOSTS, Ran, Run, eight_threads


def spawn(*argv: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`python -m exedra_engine ARGV` in a process of its own; stdout and stderr captured
    unless `kw` redirects them."""
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.run(
        [sys.executable, "-m", "exedra_engine", *argv], check=False, text=True, timeout=60, **kw
    )


def plan_args(model: Path, *extra: str) -> list[str]:
    return [
        "plan",
        "--model",
        str(model),
        "--kind",
        "llama",
        "--id",
        "tiny",
        "--no-config",
        "--executor",
        str(FAKE),
        *extra,
    ]


def test_version_and_help(run: Run) -> None:
    r = run("--version")
    assert r.returncode == 0 and r.stdout.startswith("exedra-engine ")
    r = run("--help")
    for cmd in ("probe", "inspect", "config", "plan", "launch", "demo"):
        assert cmd in r.stdout
    r = run("plan", "--help")
    assert "--explain" in r.stdout and "--api-key-env" in r.stdout


def test_emit_help_names_no_option_emit_lacks(run: Run) -> None:
    # It named a --group that emit does not take; a plan command it quotes is not its own.
    import re

    out = run("emit", "--help").stdout
    text = re.sub(r"plan( --[\w-]+( [A-Z]+)?)+", "plan", " ".join(out.split()))
    named = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", text))
    options = " ".join(ln for ln in out.splitlines() if ln.lstrip().startswith("-"))
    assert named - set(re.findall(r"--[a-z][\w-]*", options)) == set()
    assert "plan --group FILE --emit router" in " ".join(out.split())


def test_probe_json_and_text(run: Run) -> None:
    r = run("probe", "--json")
    data = json.loads(r.stdout)
    assert data["cpu"]["threads"] >= 1 and isinstance(data["gpus"], list)
    assert "threads" in run("probe").stdout


def test_inspect(tiny_llama: Path, tmp_path: Path, run: Run) -> None:
    r = run("inspect", str(tiny_llama), "--json")
    assert json.loads(r.stdout)["architecture"] == "llama"
    assert "exedra-tiny" in run("inspect", str(tiny_llama)).stdout
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope")
    r = run("inspect", str(bad))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and str(bad) in r.stderr


def test_config_redacts_secrets(tmp_path: Path, run: Run) -> None:
    (tmp_path / "a.yaml").write_text("env: {HF_TOKEN: hf_abc, OMP_NUM_THREADS: '2'}\n")
    r = run("config", str(tmp_path), "--json")
    assert json.loads(r.stdout)["env"] == {"HF_TOKEN": "<redacted>", "OMP_NUM_THREADS": "2"}
    assert "hf_abc" in run("config", str(tmp_path), "--show-secrets").stdout
    (tmp_path / "b.yaml").write_text("env: [x]\n")
    r = run("config", str(tmp_path))
    assert r.returncode == 2 and "b.yaml:1: $.env: must be a mapping" in r.stderr


def test_plan_json_is_a_plan_and_keys_stay_hidden(tiny_llama: Path, run: Run) -> None:
    r = run(
        *plan_args(tiny_llama, "--api-key-env", "MY_KEY", "--json"), env={"MY_KEY": "cli-secret-1"}
    )
    assert r.returncode == 0, r.stderr
    plan = msgspec.json.decode(r.stdout, type=LaunchPlan)
    assert plan.api_key == "<redacted>" and "cli-secret-1" not in r.stdout
    assert plan.model is not None and plan.model.name == "exedra-tiny"
    r = run(
        *plan_args(tiny_llama, "--api-key-env", "MY_KEY", "--json", "--show-secrets"),
        env={"MY_KEY": "cli-secret-1"},
    )
    assert msgspec.json.decode(r.stdout, type=LaunchPlan).api_key == "cli-secret-1"


def test_plan_is_deterministic(tiny_llama: Path, run: Run, tmp_path: Path) -> None:
    # Equal inputs, equal bytes. The host's free memory is an input (the plan records what
    # it judged the fit against) and moves between two live probes, so the host is pinned
    # as a file, as a CI job plans from a node's probe --json.
    host = tmp_path / "host.json"
    host.write_text(run("probe", "--json").stdout)
    a = run(*plan_args(tiny_llama, "--json", "--port", "9999", "--hardware", str(host)))
    b = run(*plan_args(tiny_llama, "--json", "--port", "9999", "--hardware", str(host)))
    assert a.stdout == b.stdout and a.returncode == 0, a.stderr


def test_explain_shows_layers(tiny_llama: Path, tmp_path: Path, run: Run) -> None:
    (tmp_path / "o.yaml").write_text("models:\n  tiny:\n    args: [--ctx-size, '128']\n")
    r = run(
        *[a for a in plan_args(tiny_llama) if a != "--no-config"],
        "--config",
        str(tmp_path),
        "--ctx",
        "64",
        "--explain",
        "--arg=--temp",
        "--arg",
        "0.1",
    )
    assert r.returncode == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("  arg  --ctx-size 128"))
    assert "config models.tiny" in line
    assert "overrode engine: --ctx-size 64" in r.stdout
    assert any("--temp 0.1" in ln and "caller" in ln for ln in r.stdout.splitlines())
    data = json.loads(run(*plan_args(tiny_llama, "--explain", "--json")).stdout)
    assert {s["layer"] for s in data["sources"]} == {"engine"}


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--kind", "vllm"], "argument --kind: choose from llama, transcribe"),
        (["--port", "abc"], "argument --port: expected a whole number"),
        (["--arg=--ctx-size"], "caller: flag --ctx-size needs a value"),
        (["--env", "NOEQUALS"], "argument --env: expected K=V, not NOEQUALS"),
        (["--api-key-env", "UNSET_VAR_X"], "variable UNSET_VAR_X is not set"),
        (["--capability", "asr"], "'asr' cannot be served by llama-server"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    tiny_llama: Path, extra: list[str], needle: str, run: Run
) -> None:
    r = run(*plan_args(tiny_llama), *extra)
    assert r.returncode == 2
    assert needle in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_plan_without_executor_installed(tiny_llama: Path, run: Run) -> None:
    r = run(
        "plan",
        "--model",
        str(tiny_llama),
        "--kind",
        "transcribe",
        "--no-config",
        # Nor in the executor cache (issue 18 item 16), which ./dev names for the tests.
        env={
            "PATH": str(HOSTS / "none"),
            "EXEDRA_EXECUTORS_BIN": "",
            "EXEDRA_EXECUTORS_CACHE": "/nonexistent",
        },
    )
    assert r.returncode == 2 and "whisper-server (kind transcribe) is not installed" in r.stderr
    assert "scripts/install-executors.sh" in r.stderr  # what installs it


def test_errors_stay_on_one_line_whatever_the_input(tiny_llama: Path, run: Run) -> None:
    # Found by the soak run: argparse echoed an argument containing a newline.
    r = run(*plan_args(tiny_llama), "\nsecond line")
    # (and no longer echoes it at all: a stray value may be a key, issue 18)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "second line" not in r.stderr
    r = run(*plan_args(tiny_llama), "--\nsecond-line")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "\\nsecond-line" in r.stderr
    r = run(*plan_args(tiny_llama), "--arg=--host")
    assert r.returncode == 2 and r.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "option", ["--arg", "--env", "--run-arg", "--id", "--capability", "--model", "--host"]
)
def test_an_option_given_double_dash_as_its_value_is_that_string(
    tiny_llama: Path, option: str, run: Run
) -> None:
    # Python 3.11's argparse turned ``--arg=--`` into [] and the CLI into a traceback.
    r = run(*plan_args(tiny_llama), f"{option}=--", "--json")
    assert r.returncode in (0, 2), r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") <= 1
    if r.returncode == 0:  # '--' passes through: a finding, summed up in one warning line
        assert r.stderr == "" or r.stderr.startswith("exedra-engine: warning: ")


def test_an_undecodable_host_is_escaped_in_the_endpoint_line(tmp_path: Path) -> None:
    # Found by the soak run: plan --host $'\x80' printed the URL raw, a UnicodeEncodeError
    # under a strict UTF-8 stdout.
    import contextlib
    import io

    out = io.BytesIO()
    strict = io.TextIOWrapper(out, encoding="utf-8", errors="strict")
    argv = [
        *plan_args(tmp_path / "absent.gguf"),
        "--no-port-check",
        "--host=" + os.fsdecode(b"\x80"),
    ]
    # Such a host is refused since the review (neither an IP address nor a host name): the
    # refusal quotes it, escaped the same way.
    with contextlib.redirect_stderr(strict):
        assert main(argv) == 2
        strict.flush()
    assert "--host '\\udc80' is neither" in out.getvalue().decode()


def test_config_double_dash_is_a_path_not_the_default(
    tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "--").write_text("env: {A: b}\n")
    argv = [a for a in plan_args(tmp_path / "absent.gguf") if a != "--no-config"]
    r = run(*argv, "--config=--", "--json")
    assert r.returncode == 0, r.stderr
    assert "A=b" in msgspec.json.decode(r.stdout, type=LaunchPlan).env


# -- what only a real process shows ------------------------------------------------------


def test_the_module_and_the_console_script_are_entry_points(tiny_llama: Path) -> None:
    r = spawn("--version")
    assert (r.returncode, r.stdout) == (0, f"exedra-engine {__version__}\n")
    script = Path(sys.executable).with_name("exedra-engine")
    if not script.is_file():
        pytest.fail(f"{script} is missing: run ./dev test (pip install -e .)", pytrace=False)
    # The exit status travels out of main() through the script: 2 on bad input.
    r = subprocess.run(
        [str(script), "inspect", str(tiny_llama.with_suffix(".missing"))],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize("argv", [("probe", "--json"), ("--help",), ("--version",)])
def test_a_closed_stdout_exits_0_quietly(argv: tuple[str, ...]) -> None:
    # The reader went away (`| true`): not a failure, or `set -o pipefail` steps fail on it.
    read, write = os.pipe()
    os.close(read)  # every write to the pipe now fails with EPIPE
    try:
        r = spawn(*argv, stdout=write)
    finally:
        os.close(write)
    assert (r.returncode, r.stderr) == (0, "")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
@pytest.mark.parametrize("argv", [("probe", "--json"), ("--help",), ("--version",)])
def test_a_full_stdout_is_one_line_and_exit_1(argv: tuple[str, ...]) -> None:
    with open("/dev/full", "w") as full:
        r = spawn(*argv, stdout=full)
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("exedra-engine: error: cannot write: ")


@pytest.mark.parametrize("name", [None, b"m\xff.gguf"])
def test_launch_runs_until_sigterm(tiny_llama: Path, tmp_path: Path, name: bytes | None) -> None:
    # Also under a model name that is not UTF-8 and a stdout that accepts only UTF-8: the
    # ready line's JSON escapes the path (it was a UnicodeEncodeError once the executor ran).
    import shutil
    import signal
    import time

    model = tiny_llama
    if name is not None:
        model = Path(os.fsdecode(os.fsencode(tmp_path) + b"/" + name))
        shutil.copy(tiny_llama, model)
    launch = ["launch", *plan_args(model, "--json")[1:]]
    p = subprocess.Popen(
        [sys.executable, "-m", "exedra_engine", *launch],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "FAKE_MODE": "ok", "PYTHONIOENCODING": "utf-8:strict"},
    )
    assert p.stdout is not None
    ready = json.loads(p.stdout.readline())
    assert ready["url"].startswith("http://127.0.0.1:")
    assert ready["plan"]["spec"]["path"] == os.fspath(model)
    time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    assert "stopped   exit 0 after a stop request" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--model", "/m.gguf", "--kind", "llama", "--json", "--arg=--temp=0.5"],
        ["probe", "--json"],
        ["wait-ready", "http://127.0.0.1:8080", "--timeout", "5"],
    ],
)
def test_a_command_named_first_is_parsed_by_its_parser_alone_as_by_the_whole(
    argv: list[str],
) -> None:
    import argparse

    from exedra_engine.cli import build_parser

    alone = build_parser(only=argv[0])
    sub = next(a for a in alone._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == [argv[0]]
    got, want = vars(alone.parse_args(argv)), vars(build_parser().parse_args(argv))
    assert got.pop("func").__qualname__ == want.pop("func").__qualname__
    assert got == want


# -- planned on a host file: threads, --strict, --emit wording --------------------------


def _plan(run: Run, model: Path, tmp_path: Path, *args: str, command: str = "plan") -> Ran:
    """`exedra-engine COMMAND` for `model`, on a host file of `eight_threads()`, no port check."""
    hw = tmp_path / "here.json"
    hw.write_bytes(msgspec.json.encode(eight_threads()))
    base = ("--model", str(model), "--kind", "llama", "--hardware", str(hw), "--no-port-check")
    return run(command, *base, *args)


@pytest.mark.parametrize("command", ["plan", "launch"])
def test_threads_100000_is_an_input_error_on_the_command_line(
    command: str, tiny_llama: Path, tmp_path: Path, run: Run
) -> None:
    r = _plan(run, tiny_llama, tmp_path, "--threads", "100000", command=command)
    assert r.code == 2, r
    assert "threads 100000 (--threads) is more than 512" in r.err and r.err.count("\n") == 1
    assert psutil.Process().children(recursive=True) == []


def test_threads_above_ggml_cap_in_caller_args_fails_strict(
    tiny_llama: Path, tmp_path: Path, run: Run
) -> None:
    r = _plan(run, tiny_llama, tmp_path, "--arg=--threads", "--arg=9000", "--strict")
    assert r.code == 2 and "--threads 9000 is more than 512" in r.err, r


def test_one_emitted_file_matches_the_plan(tiny_llama: Path, tmp_path: Path, run: Run) -> None:
    r = _plan(run, tiny_llama, tmp_path, "--emit", "k8s", "--check")
    assert r.code == 0, r
    assert r.out.rstrip().endswith(".yaml matches the plan (k8s)"), r.out


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


# -- a module per command, data out, one renderer ---------------------------------------


def test_a_module_per_command_with_its_parser_beside_its_handler() -> None:
    import argparse
    import importlib

    from exedra_engine.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert len(sub.choices) >= 9
    for name, command in sub.choices.items():
        module = importlib.import_module(f"exedra_engine.cli.{name.replace('-', '_')}")
        assert callable(module.add_parser), name
        assert command.get_default("func").__module__ == module.__name__, name


@pytest.mark.parametrize(("command", "value"), [("probe", "Hardware"), ("config", "Config")])
def test_a_command_returns_data_and_one_renderer_prints_it(
    command: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from exedra_engine.cli import build_parser
    from exedra_engine.cli.render import Report, show

    a = build_parser().parse_args([command, *([str(tmp_path)] if command == "config" else [])])
    report = a.func(a)
    assert isinstance(report, Report) and type(report.value).__name__ == value
    assert capsys.readouterr().out == ""  # the handler printed nothing: show does
    assert show(report, as_json=True) == 0
    assert isinstance(msgspec.json.decode(capsys.readouterr().out), dict)
    assert show(report, as_json=False) == 0
    text = capsys.readouterr().out
    assert text.strip() and not text.startswith("{")
