"""Issue 20: the seams between the CLI, the shells and the core, where each part passed its
own tests and the two together crashed."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import msgspec
import pytest

from exedra_engine import Constraints, Kind, ModelSpec
from exedra_engine._shell.plan import PlanRequest, explain_request
from exedra_engine._shell.probe import probe
from exedra_engine.cli import exit_status
from exedra_engine.errors import (
    ConfigError,
    EmitError,
    EngineError,
    HardwareFileError,
    LaunchError,
    NoHardware,
    NotReady,
    PlanError,
)
from tests.conftest import Run, host

MODEL = "/var/lib/exedra/models/qwen/model.gguf"


def _hardware_file(tmp_path: Path, tree: str = "nvidia") -> Path:
    f = tmp_path / f"{tree}.json"
    f.write_bytes(msgspec.json.encode(probe(host(tree)).unwrap()))
    return f


def test_plan_emit_with_a_config_file(tmp_path: Path, run: Run) -> None:
    # The CLI spread a positional (spec, hw, constraints, files) into plan_explained, whose
    # fourth parameter is the HostFiles port: with any override file, `plan --emit` crashed.
    conf = tmp_path / "conf.yaml"
    conf.write_text("env: {EXEDRA_MARK: from-config}\nengines: {llama: {args: [-c, '512']}}\n")
    hw = _hardware_file(tmp_path)
    for target in ("k8s", "systemd", "quadlet"):
        r = run(
            "plan",
            "--model",
            MODEL,
            "--kind",
            "llama",
            "--hardware",
            str(hw),
            "--host",
            "0.0.0.0",
            "--port",
            "8080",
            "--no-port-check",
            "--config",
            str(conf),
            "--emit",
            target,
            # a waiter a unit can reach: this checkout's venv may be under /tmp (PrivateTmp=)
            "--waiter",
            "/usr/local/lib/exedra-engine/bin/exedra-engine",
        )
        assert r.code == 0, (target, r.err)
        assert "Traceback" not in r.err
        # The override reached the emitted files: the config was planned with, not dropped.
        assert "from-config" in r.out, target
        assert "512" in r.out, target


# -- item 2: types that see through the seams ----------------------------------------------

SRC = Path(__file__).resolve().parents[2] / "src" / "exedra_engine"


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text(), str(p))) for p in sorted(SRC.rglob("*.py"))]


def _name(node: ast.expr) -> str:
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def test_the_library_matches_no_result() -> None:
    # Under returns, `case Success(v)` types `v` as Any: mypy stops seeing exactly where two
    # layers meet (no mypy setting flags it; --disallow-any-expr is silent). Inside the
    # library errors are raised; a Result is made once, at the public boundary, and never
    # taken apart again.
    found = [
        f"{p.relative_to(SRC)}:{n.lineno}"
        for p, tree in _modules()
        for n in ast.walk(tree)
        if isinstance(n, ast.MatchClass) and _name(n.cls) in ("Success", "Failure")
    ]
    assert found == []


def test_no_assertion_stands_in_for_an_exhaustive_match() -> None:
    found = [
        f"{p.relative_to(SRC)}:{n.lineno}"
        for p, tree in _modules()
        for n in ast.walk(tree)
        if isinstance(n, ast.Raise)
        and isinstance(n.exc, ast.Call)
        and _name(n.exc.func) == "AssertionError"
    ]
    assert found == []


def test_as_result_is_only_a_public_boundary() -> None:
    # `as_result` converts once: it is what a public function returns, nothing else.
    bad = []
    for p, tree in _modules():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for n in ast.walk(fn):
                if isinstance(n, ast.Call) and _name(n.func) == "as_result":
                    returned = any(
                        isinstance(r, ast.Return) and r.value is not None and n in ast.walk(r.value)
                        for r in fn.body
                    )
                    if fn.name.startswith("_") or not returned:
                        bad.append(f"{p.relative_to(SRC)}:{n.lineno} in {fn.name}")
    assert bad == []


def test_the_command_line_never_sees_a_result() -> None:
    bad = [
        f"{p.relative_to(SRC)}:{n.lineno}"
        for p, tree in _modules()
        if p.parent.name == "cli"
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("returns")
    ]
    assert bad == []


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


def test_plan_request_is_a_value() -> None:
    spec = ModelSpec(id="m", path=MODEL, kind=Kind.LLAMA)
    req = PlanRequest(spec=spec, hardware=None)
    assert req == PlanRequest(spec=spec, hardware=None, constraints=Constraints())
    with pytest.raises(AttributeError):
        req.spec = spec  # type: ignore[misc]
    with pytest.raises(NoHardware):
        explain_request(req)


# -- item 7: the CLI as pipx does it -------------------------------------------------------


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


# -- item 9: smaller ----------------------------------------------------------------------

COPIED = "sk-copied-key-0123456789"


def _copied_key_argv(*extra: str) -> list[str]:
    return [
        "plan",
        "--model",
        MODEL,
        "--kind",
        "llama",
        "--executor",
        "/nonexistent/llama-server",
        "--no-config",
        "--no-port-check",
        "--api-key-env",
        "EXEDRA_SEAMS_KEY",
        f"--env=OTHER={COPIED}",
        f"--env=LIST=a,{COPIED}",
        "--arg=--alias",
        f"--arg={COPIED}",
        f"--arg=--temp={COPIED}",
        *extra,
    ]


@pytest.mark.parametrize(
    "surface", [(), ("--json",), ("--explain",), ("--explain", "--json"), ("--strict",)]
)
def test_the_key_value_is_hidden_whatever_carries_it(surface: tuple[str, ...], run: Run) -> None:
    r = run(*_copied_key_argv(*surface), env={"EXEDRA_SEAMS_KEY": COPIED})
    assert r.code in (0, 2), r.err
    assert COPIED not in r.out + r.err
    if not surface or surface == ("--json",):
        assert "OTHER=<redacted>" in r.out and "LIST=<redacted>" in r.out
        assert "--alias" in r.out  # the flag stays; only its value is hidden
    shown = run(*_copied_key_argv(*surface, "--show-secrets"), env={"EXEDRA_SEAMS_KEY": COPIED})
    assert COPIED in shown.out + shown.err  # the check can fail


def test_the_engine_flags_are_not_judged_by_what_a_key_equals(run: Run) -> None:
    # Redaction compares whole values, set above the engine layer: a key that happens to
    # equal the bind address does not hide the planner's own --host.
    r = run(
        "plan", "--model", MODEL, "--kind", "llama", "--executor", "/x/llama-server",
        "--no-config", "--no-port-check", "--json", "--api-key-env", "EXEDRA_SEAMS_KEY",
        env={"EXEDRA_SEAMS_KEY": "127.0.0.1"},
    )  # fmt: skip
    plan = msgspec.json.decode(r.out)
    assert plan["host"] == "127.0.0.1" and "127.0.0.1" in plan["args"]


def test_emit_refuses_a_copied_key(tmp_path: Path, run: Run) -> None:
    hw = _hardware_file(tmp_path)
    r = run(
        *_copied_key_argv("--hardware", str(hw), "--host", "0.0.0.0", "--emit", "k8s"),
        "--secret",
        "model-key",
        env={"EXEDRA_SEAMS_KEY": COPIED},
    )
    assert r.code == 2 and COPIED not in r.out + r.err
    assert "OTHER" in r.err and "--alias" in r.err


def test_paths_may_be_bytes_or_path_like(tmp_path: Path) -> None:
    from exedra_engine import inspect, load_config
    from exedra_engine.testing import write_tiny_llama

    conf = tmp_path / "c.yaml"
    conf.write_text("env: {A: b}\n")
    want = load_config(str(conf)).unwrap()
    assert want.env == {"A": "b"}
    assert load_config(conf).unwrap() == want
    assert load_config(os.fsencode(conf)).unwrap() == want
    model = write_tiny_llama(tmp_path / "m.gguf")
    info = inspect(str(model)).unwrap()
    assert inspect(model).unwrap() == info
    assert inspect(os.fsencode(model)).unwrap() == info
    undecodable = os.fsencode(tmp_path) + b"/m\xff.gguf"
    assert "m\udcff.gguf" in str(inspect(undecodable).failure())


def test_the_errors_public_functions_raise_are_exported() -> None:
    import exedra_engine

    assert exedra_engine.HardwareFileError is HardwareFileError
    assert exedra_engine.EmitError is EmitError
    assert {"HardwareFileError", "EmitError"} <= set(exedra_engine.__all__)


def test_the_quick_loop_leaves_slow_tests_out_and_ci_runs_them() -> None:
    recipes: dict[str, list[str]] = {}
    name = ""
    for line in (SRC.parent.parent / "justfile").read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith("#") and ":" in line:
            name = line.split()[0].rstrip(":")
            recipes[name] = []
        elif line.startswith("    ") and name:
            recipes[name].append(line.strip())
    # Both go through the two-phase runner (scripts/test-phases.sh), which adds the marks.
    assert any('test-phases.sh "not slow"' in c for c in recipes["test-quick"])
    assert not any("slow" in c for c in recipes["test"])
    ci = (SRC.parent.parent / ".ci" / "run").read_text()
    assert "./dev test\n" in ci


# -- item 8: start-up cost ----------------------------------------------------------------

LAZY = (
    "returns",  # the CLI makes no Result
    "exedra_engine._core.emit",  # a plain plan emits nothing
    "exedra_engine._shell.local.flag_tables",  # only --explain/--strict and probe ask binaries
    "exedra_engine._core.executors.helptext",
    "yaml",  # only `config` prints YAML and override files parse it
    "socket",  # the port dump needs _socket only
    "trio",  # the launcher
    "shutil",  # zlib, bz2 and lzma with it
)


def test_a_plain_plan_loads_none_of_the_lazy_modules(tmp_path: Path) -> None:
    import subprocess
    import sys

    # A hardware file: probing this machine asks its installed executors for their versions
    # (the flag-table cache), which is what a probe is for.
    argv = [
        "plan", "--model", str(tmp_path / "absent.gguf"), "--kind", "llama",
        "--no-config", "--hardware", str(_hardware_file(tmp_path)), "--json",
    ]  # fmt: skip
    code = (
        "import sys, io, contextlib\n"
        "from exedra_engine.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = main(sys.argv[1:])\n"
        "print(code, *sorted(sys.modules))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True
    )
    status, *loaded = r.stdout.split()
    assert status == "0", r.stderr
    assert [m for m in loaded if m.split(".")[0] in LAZY or m.startswith(LAZY)] == []
