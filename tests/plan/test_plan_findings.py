"""The planner says what it passes through: findings as warnings in plan --explain and its
JSON, plan --strict, and a pure planner that judges by the table it is given (issue 13)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from exedra_engine import (
    Config,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    LaunchPlan,
    ModelSpec,
    Override,
    explain_launch,
    plan_launch,
)
from exedra_engine._core.config.findings import Finding, Severity
from exedra_engine._core.config.parse import located_config_from_yaml
from exedra_engine._core.executors.builtin import executor_profile
from exedra_engine._core.executors.flags import table_from_rows
from exedra_engine._core.values import CPU
from exedra_engine.cli.render import findings_heading
from tests.conftest import FAKE, Run

LLAMA = executor_profile(Kind.LLAMA)
HW = Hardware(
    cpu=CPU(threads=4),
    executors=(
        ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server"),
        ExecutorInfo(kind=Kind.TRANSCRIBE, path="/usr/bin/whisper-server"),
    ),
)
SPEC = ModelSpec(id="qwen", path="/models/qwen.gguf", kind=Kind.LLAMA)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def plan_args(config: Path, *extra: str, executor: str = str(FAKE)) -> list[str]:
    return [
        "plan",
        "--model",
        "/nonexistent/qwen.gguf",
        "--kind",
        "llama",
        "--id",
        "qwen",
        "--config",
        str(config),
        "--executor",
        executor,
        "--no-port-check",
        *extra,
    ]


@pytest.fixture
def engine_d(tmp_path: Path) -> Path:
    d = tmp_path / "engine.d"
    d.mkdir()
    (d / "10-gpu.yaml").write_text(
        '# GPU hosts\nengines: {llama: {args: [--flash-attn, "on", --ctx-szie, "4096"]}}\n'
    )
    (d / "20-qwen.yaml").write_text(
        "models:\n  qwen:\n    args:\n      - --ctx-size\n      - 16k\n"
    )
    return d


# -- the pure planner -----------------------------------------------------------------------


def test_the_plan_is_the_same_with_and_without_its_findings() -> None:
    c = Constraints(
        overrides=Config(engines={Kind.LLAMA: Override(args=("--ctx-szie", "4096"))}),
        extra_args=("--threds", "2"),
    )
    e = explain_launch(SPEC, HW, c).unwrap()
    assert e.plan == plan_launch(SPEC, HW, c).unwrap()
    assert [(f.code, f.file, f.path, f.token) for f in e.findings] == [
        ("unknown-flag", "", "$.engines.llama.args[0]", "--ctx-szie"),
        ("unknown-flag", "", "caller args[0]", "--threds"),
    ]
    assert [f.suggestion for f in e.findings] == ["--ctx-size", "--threads"]


def test_the_planner_judges_by_the_table_it_is_given() -> None:
    # A table with --turbo added and --mlock removed: the verdict follows the table.
    rows = [r for r in LLAMA.flag_rows if "--mlock" not in r[0]]
    rows.append((("--turbo",), (), 1, (), "int"))
    table = table_from_rows(LLAMA.binary, rows, LLAMA.repeatable)
    c = Constraints(extra_args=("--mlock", "--turbo", "2"))
    bundled = explain_launch(SPEC, HW, c).unwrap().findings
    given = explain_launch(SPEC, HW, c, flags=table).unwrap().findings
    assert [(f.code, f.token) for f in bundled] == [("unknown-flag", "--turbo")]
    assert [(f.code, f.token) for f in given] == [("unknown-flag", "--mlock")]
    c = Constraints(extra_args=("--turbo", "2x"))
    (f,) = explain_launch(SPEC, HW, c, flags=table).unwrap().findings
    assert f.code == "bad-value" and "reads '2x' as 2" in f.message


def test_files_give_findings_their_file_and_line() -> None:
    files = [
        located_config_from_yaml("env:\n  LLAMA_ARG_THREADS: '4'\n", "00.yaml").unwrap(),
        located_config_from_yaml(
            "engines:\n  llama:\n    args: [--port, '9000']\nmodels:\n  other:\n    args: [-x]\n"
            "  qwen:\n    args:\n      - -ngll\n      - '9'\n",
            "10.yaml",
        ).unwrap(),
    ]
    overrides = Config(
        env={"LLAMA_ARG_THREADS": "4"},
        engines={Kind.LLAMA: Override(args=("--port", "9000"))},
        models={"other": Override(args=("-x",)), "qwen": Override(args=("-ngll", "9"))},
    )
    e = explain_launch(SPEC, HW, Constraints(overrides=overrides), config_files=files).unwrap()
    # models.other does not reach this plan; a layer's port does, with a warning.
    assert [(f.file, f.line, f.code, f.severity) for f in e.findings] == [
        ("10.yaml", 3, "sets-endpoint", "warning"),
        ("10.yaml", 9, "unknown-flag", "error"),
    ]
    assert e.plan.port == 9000


def test_a_global_llama_variable_is_not_a_finding_of_a_whisper_plan() -> None:
    spec = ModelSpec(id="base", path="/models/base.bin", kind=Kind.TRANSCRIBE)
    c = Constraints(overrides=Config(env={"LLAMA_ARG_THREADS": "4"}))
    assert explain_launch(spec, HW, c).unwrap().findings == ()
    c = Constraints(extra_env=("LLAMA_ARG_THREADS=4",))
    (f,) = explain_launch(spec, HW, c).unwrap().findings
    assert (f.code, f.path) == ("wrong-kind", "caller env.LLAMA_ARG_THREADS")


# -- the command line -----------------------------------------------------------------------


def test_explain_lists_the_findings_with_file_and_line(engine_d: Path, run: Run) -> None:
    r = run(*plan_args(engine_d, "--explain", "--arg=--threds", "--arg", "2"))
    assert r.code == 0, r.err
    # the findings section ends at the next blank line (the memory arithmetic follows it)
    text = r.out.split("\nfindings, judged by ", 1)[1].split("\n\n", 1)[0].splitlines()
    assert text[0] == (
        f"llama-server: the bundled table, made from build 0.10434 ({FAKE} --help listed no flags):"
    )
    assert text[1:] == [
        f"  {engine_d / '10-gpu.yaml'}:2: error: $.engines.llama.args[2]: llama-server has no "
        "flag --ctx-szie: the planner passes it through as written and llama-server refuses "
        "to start on it (did you mean --ctx-size?) [unknown-flag]",
        f"  {engine_d / '20-qwen.yaml'}:5: error: $.models.qwen.args[1]: --ctx-size takes an "
        "integer: llama-server reads '16k' as 16 (it stops at the first character that is not "
        "a digit) (did you mean 16384?) [bad-value]",
        "  caller args[0]: error: llama-server has no flag --threds: the planner passes it "
        "through as written and llama-server refuses to start on it (did you mean --threads?) "
        "[unknown-flag]",
    ]


def test_explain_json_has_the_findings_under_their_own_key(engine_d: Path, run: Run) -> None:
    r = run(*plan_args(engine_d, "--explain", "--json"))
    data = json.loads(r.out)
    assert list(data) == ["plan", "sources", "findings", "flag_table", "memory"]
    msgspec.convert(data["plan"], LaunchPlan)  # the plan keeps its own shape
    assert [(f["file"].rsplit("/", 1)[-1], f["line"], f["code"]) for f in data["findings"]] == [
        ("10-gpu.yaml", 2, "unknown-flag"),
        ("20-qwen.yaml", 5, "bad-value"),
    ]
    assert data["flag_table"]["source"] == "bundled"


def test_a_plain_plan_keeps_its_json_and_warns_on_stderr(engine_d: Path, run: Run) -> None:
    r = run(*plan_args(engine_d, "--json"))
    assert r.code == 0
    msgspec.json.decode(r.out, type=LaunchPlan)
    assert r.err == (
        "exedra-engine: warning: 2 errors in what this plan passes on, judged by "
        "the bundled flag table; plan --explain lists them, judged by the installed binary\n"
    )


@pytest.mark.parametrize(
    ("severities", "heading"),
    [
        (("note",), "note: 1 note"),
        (("note", "note"), "note: 2 notes"),
        (("warning", "note"), "warning: 1 warning, 1 note"),
        (("error", "error"), "warning: 2 errors"),
    ],
)
def test_the_findings_line_counts_no_zero_and_is_a_note_when_only_notes(
    severities: tuple[Severity, ...], heading: str
) -> None:
    findings = [
        Finding(severity=s, code="c", path="caller args[0]", token="-x", message="m")
        for s in severities
    ]
    assert findings_heading(findings) == heading


def test_strict_refuses_a_plan_with_findings(engine_d: Path, tmp_path: Path, run: Run) -> None:
    r = run(*plan_args(engine_d, "--strict"))
    assert (r.code, r.out) == (2, "")
    assert r.err.count("\n") == 1
    assert r.err.startswith("exedra-engine: error: --strict: the plan has findings (2 errors")
    assert "10-gpu.yaml:2: error: $.engines.llama.args[2]" in r.err
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "10.yaml").write_text("models:\n  qwen:\n    args: [--ctx-size, '16384']\n")
    r = run(*plan_args(clean, "--strict", "--json"))
    assert r.code == 0 and r.err == ""
    msgspec.json.decode(r.out, type=LaunchPlan)


def test_strict_refuses_a_warning_too(tmp_path: Path, run: Run) -> None:
    (tmp_path / "10.yaml").write_text("engines:\n  llama:\n    args: [--port, '9000']\n")
    assert run(*plan_args(tmp_path)).code == 0
    r = run(*plan_args(tmp_path, "--strict"))
    assert r.code == 2 and "sets-endpoint" in r.err


def test_explain_judges_by_the_real_binary(engine_d: Path, llama_server: str, run: Run) -> None:
    r = run(*plan_args(engine_d, "--explain", executor=llama_server))
    assert f"findings, judged by llama-server: {llama_server} --help, version " in r.out
    assert "10-gpu.yaml:2: error: $.engines.llama.args[2]" in r.out
