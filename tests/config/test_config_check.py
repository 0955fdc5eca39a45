"""`exedra-engine config --check`: every finding names the file, the line, the field path and
the token, judged by the executors' flag tables (issue 13)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exedra_engine._core.config.check import check_file
from exedra_engine._core.config.findings import Finding
from exedra_engine._core.config.parse import located_config_from_yaml
from tests.conftest import Run


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Parsed --help texts are cached per binary: these tests keep theirs to themselves.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def findings(text: str, source: str = "10-site.yaml") -> tuple[Finding, ...]:
    return check_file(located_config_from_yaml(text, source).unwrap())


def one(text: str, code: str) -> Finding:
    hits = [f for f in findings(text) if f.code == code]
    assert len(hits) == 1, findings(text)
    return hits[0]


# -- the issue's own example, through the command line ------------------------------------


def test_the_issue_example_fails_with_file_line_path_and_suggestion(
    tmp_path: Path, run: Run
) -> None:
    f = tmp_path / "engine.d" / "10-gpu.yaml"
    f.parent.mkdir()
    f.write_text(
        '# site overrides\nengines: {llama: {args: [--flash-attn, "on", --ctx-szie, "4096"]}}\n'
    )
    r = run("config", "--check", str(f.parent), "--executor", "llama=/bin/true")
    assert r.code == 1, r
    first = r.out.splitlines()[0]
    assert first == (
        f"{f}:2: error: $.engines.llama.args[2]: llama-server has no flag --ctx-szie: the planner "
        "passes it through as written and llama-server refuses to start on it "
        "(did you mean --ctx-size?) [unknown-flag]"
    )
    assert "1 file, 1 error, 0 warnings" in r.out


def test_a_clean_directory_exits_0(tmp_path: Path, run: Run) -> None:
    (tmp_path / "10.yaml").write_text(
        "engines:\n  llama:\n    args: [--flash-attn, 'on', --cache-type-k, q8_0, -c, '8192']\n"
        "models:\n  qwen:\n    args: [--ctx-size, '16384']\n    env: {LLAMA_ARG_N_PARALLEL: '2'}\n"
    )
    r = run("config", "--check", str(tmp_path))
    assert r.code == 0, r.out
    assert "1 file, 0 errors, 0 warnings" in r.out
    assert "judged by llama-server" in r.out


def test_a_missing_named_directory_and_an_unreadable_file_exit_2(tmp_path: Path, run: Run) -> None:
    # A path named on the command line must exist (issue 18 item 11): a typo is not "clean".
    assert run("config", "--check", str(tmp_path / "nothing")).code == 2
    (tmp_path / "x.YAML").write_text("{}")
    r = run("config", "--check", str(tmp_path))
    assert r.code == 2 and "rename it" in r.err


def test_a_file_the_loader_refuses_is_a_finding_and_exits_2(tmp_path: Path, run: Run) -> None:
    (tmp_path / "10.yaml").write_text("engines:\n  vllm:\n    args: []\n")
    (tmp_path / "20.yaml").write_text("engines:\n  llama:\n    args: [--ctx-szie, '1']\n")
    r = run("config", "--check", str(tmp_path), "--json")
    assert r.code == 2
    data = json.loads(r.out)
    assert [(d["code"], d["file"].rsplit("/", 1)[-1], d["line"]) for d in data] == [
        ("invalid-file", "10.yaml", 3),
        ("unknown-flag", "20.yaml", 3),
    ]
    assert data[0]["path"] == "$.engines.vllm"
    assert data[0]["message"].startswith("unknown engine kind 'vllm'")


def test_warnings_pass_unless_strict(tmp_path: Path, run: Run) -> None:
    (tmp_path / "10.yaml").write_text("engines:\n  llama:\n    args: [--port, '9000']\n")
    r = run("config", "--check", str(tmp_path))
    assert r.code == 0, r.out
    assert f"{tmp_path / '10.yaml'}:3: warning: $.engines.llama.args[0]: sets the port" in r.out
    assert run("config", "--check", str(tmp_path), "--strict").code == 1


def test_strict_and_executor_need_check(tmp_path: Path, run: Run) -> None:
    r = run("config", str(tmp_path), "--strict")
    assert r.code == 2 and "go with --check" in r.err


def test_json_is_a_stable_list_of_findings(tmp_path: Path, run: Run) -> None:
    (tmp_path / "10.yaml").write_text(
        "models:\n  qwen:\n    args:\n      - -ngll\n      - '99'\n      - --ctx-size=128\n"
    )
    a = run("config", "--check", str(tmp_path), "--json")
    b = run("config", "--check", str(tmp_path), "--json")
    assert a.code == 1 and a.out == b.out
    data = json.loads(a.out)
    assert [list(d) for d in data] == [
        ["severity", "code", "file", "line", "path", "token", "message", "suggestion"]
    ] * 2
    assert data[0] == {
        "severity": "error",
        "code": "unknown-flag",
        "file": str(tmp_path / "10.yaml"),
        "line": 4,
        "path": "$.models.qwen.args[0]",
        "token": "-ngll",
        "message": "llama-server has no flag -ngll: the planner passes it through as written "
        "and llama-server refuses to start on it",
        "suggestion": "-ngl",
    }
    assert data[1]["code"] == "equals-form" and data[1]["severity"] == "warning"
    assert "judged by" in a.err


# -- each finding, with its line ----------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "suggestion"),
    [("--ctx-szie", "--ctx-size"), ("-ngll", "-ngl"), ("--flash-atn", "--flash-attn")],
)
def test_did_you_mean(token: str, suggestion: str) -> None:
    f = one(f"engines:\n  llama:\n    args:\n      - {token}\n      - '1'\n", "unknown-flag")
    assert (f.line, f.path, f.token, f.suggestion) == (
        4,
        "$.engines.llama.args[0]",
        token,
        suggestion,
    )


def test_a_flag_without_its_value() -> None:
    f = one("engines:\n  llama:\n    args:\n      - --threads\n", "missing-value")
    assert (f.line, f.token) == (4, "--threads")
    assert "takes a value but the list ends" in f.message


def test_a_flag_followed_by_another_flag() -> None:
    f = one("engines:\n  llama:\n    args: [--ctx-size, --mlock]\n", "value-is-flag")
    assert (f.line, f.path, f.token) == (3, "$.engines.llama.args[0]", "--ctx-size")
    assert "would give --mlock to --ctx-size as its value" in f.message


def test_a_negative_number_is_a_value_not_a_flag() -> None:
    assert findings("engines:\n  llama:\n    args: [--n-predict, '-1', --keep, '-1']\n") == ()


def test_the_equals_form_says_what_the_planner_and_the_executor_do() -> None:
    f = one("engines:\n  llama:\n    args: ['--ctx-size=128']\n", "equals-form")
    assert (f.severity, f.line, f.token, f.suggestion) == (
        "warning",
        3,
        "--ctx-size=128",
        "--ctx-size 128",
    )
    assert "the planner splits --ctx-size=128 into two arguments" in f.message
    assert "llama-server itself refuses --ctx-size=128" in f.message


def test_the_equals_form_of_a_switch_is_an_error() -> None:
    f = one("engines:\n  llama:\n    args: ['--mlock=1']\n", "equals-form")
    assert f.severity == "error" and "the planner refuses it" in f.message


def test_the_equals_form_never_shows_a_key() -> None:
    f = one("engines:\n  llama:\n    args: ['--api-key=sk-secret']\n", "equals-form")
    assert "sk-secret" not in f.token + f.message + f.suggestion
    assert f.token == "--api-key=<redacted>"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ("[--webui, --no-webui]", "--no-webui contradicts --webui"),
        ("[-fa, 'on', --flash-attn, 'off']", "--flash-attn off contradicts -fa on"),
        ("[-nkvo, -kvo]", "-kvo contradicts -nkvo"),
    ],
)
def test_on_off_pairs_in_one_layer(args: str, said: str) -> None:
    f = one(f"engines:\n  llama:\n    args: {args}\n", "contradicts")
    assert f.line == 3 and said in f.message and "(line 3)" in f.message


def test_a_later_file_may_turn_a_flag_off() -> None:
    # Layers are per file: a later file overriding an earlier one is the point of layering.
    assert findings("engines:\n  llama:\n    args: [--no-webui]\n") == ()
    assert findings("engines:\n  llama:\n    args: [--lora, a.gguf, --lora, b.gguf]\n") == ()


def test_an_env_name_the_executor_does_not_read() -> None:
    f = one("env:\n  OMP_NUM_THREADS: '4'\n  LLAMA_ARG_CTX_SIZ: '4096'\n", "unknown-env")
    assert (f.line, f.path, f.token, f.suggestion) == (
        3,
        "$.env.LLAMA_ARG_CTX_SIZ",
        "LLAMA_ARG_CTX_SIZ",
        "LLAMA_ARG_CTX_SIZE",
    )


def test_host_port_and_key_overrides_are_warned() -> None:
    found = findings(
        "engines:\n  llama:\n    args: [--host, 0.0.0.0, --port, '9000', --api-key, sk-1]\n"
        "    env:\n      LLAMA_API_KEY: sk-2\n"
    )
    assert [(f.code, f.severity, f.token, f.line) for f in found] == [
        ("sets-endpoint", "warning", "--host", 3),
        ("sets-endpoint", "warning", "--port", 3),
        ("sets-api-key", "warning", "--api-key", 3),
        ("sets-api-key", "warning", "LLAMA_API_KEY", 5),
    ]
    assert "bind address" in found[0].message and "port" in found[1].message
    assert all("sk-" not in f.message + f.token for f in found)


@pytest.mark.parametrize(
    ("args", "value", "why", "suggestion"),
    [
        ("[--ctx-size, 16k]", "16k", "reads '16k' as 16", "16384"),
        ("[-c, abc]", "abc", "refuses 'abc' at start", ""),
        ("[--threads, '1.5']", "1.5", "reads '1.5' as 1", "1"),
        ("[--ctx-size, '99999999999']", "99999999999", "out of an integer's range", ""),
        ("[--temp, abc]", "abc", "--temp takes a number", ""),
        ("[--flash-attn, maybe]", "maybe", "takes one of on, off, auto", ""),
        ("[--rope-scaling, LINEAR]", "LINEAR", "refuses 'LINEAR'", "linear"),
        ("[--cache-type-k, q9_0]", "q9_0", "takes one of f32, f16", "q8_0"),
    ],
)
def test_a_value_the_executor_refuses_or_misreads(
    args: str, value: str, why: str, suggestion: str
) -> None:
    f = one(f"engines:\n  llama:\n    args: {args}\n", "bad-value")
    assert (f.line, f.path, f.token, f.suggestion) == (
        3,
        "$.engines.llama.args[1]",
        value,
        suggestion,
    )
    assert why in f.message


def test_values_the_executor_takes() -> None:
    got = findings(
        "engines:\n  llama:\n    args: [-c, '8192', --temp, '0.7', -fa, 'true', -ngl, all,"
        " --cpu-strict, '1', --rope-scale, '2']\n"
    )
    # -ngl is taken as written; the one finding is that it switches the fitter off (issue 19)
    assert [(f.code, f.token) for f in got] == [("fitter-off", "-ngl")]


def test_an_env_value_is_judged_like_its_flag() -> None:
    f = one("engines:\n  llama:\n    env: {LLAMA_ARG_CTX_SIZE: 16k}\n", "bad-value")
    assert f.token == "LLAMA_ARG_CTX_SIZE" and f.suggestion == "16384"


@pytest.mark.parametrize(
    ("key", "why"),
    [
        ("'qwen,llama'", "splits --alias at it"),
        ("' qwen'", "begins or ends with a space"),
        ("''", "is empty"),
        ('"q\\twen"', "control character"),
    ],
)
def test_a_model_id_that_is_not_valid(key: str, why: str) -> None:
    f = one(f"models:\n  ok: {{}}\n  {key}:\n    args: []\n", "bad-model-id")
    assert f.line == 3 and why in f.message


def test_an_engines_key_for_a_kind_without_the_flag() -> None:
    f = one("engines:\n  transcribe:\n    args: [--ctx-size, '4096']\n", "wrong-kind")
    assert (f.line, f.token) == (3, "--ctx-size")
    assert "--ctx-size is a flag of llama-server (kind llama)" in f.message
    assert "whisper-server (kind transcribe) has no such flag" in f.message
    g = one("engines:\n  transcribe:\n    env: {LLAMA_ARG_THREADS: '4'}\n", "wrong-kind")
    assert g.line == 3 and "whisper-server (kind transcribe) reads no such variable" in g.message


def test_a_stray_value() -> None:
    f = one("engines:\n  llama:\n    args: [--mlock, '4096']\n", "stray-value")
    assert (f.line, f.path, f.token) == (3, "$.engines.llama.args[1]", "4096")


def test_an_unknown_flag_takes_its_values_along() -> None:
    assert [f.code for f in findings("engines:\n  llama:\n    args: [--ctx-szie, '4096']\n")] == [
        "unknown-flag"
    ]


def test_a_models_entry_is_judged_by_the_kind_its_flags_belong_to() -> None:
    # --ctx-size and -ngl are llama-server's: the entry is judged as llama's, typo and all.
    found = findings("models:\n  qwen:\n    args: [--ctx-size, 16k, -ngll, '9']\n")
    assert [(f.code, f.token) for f in found] == [("bad-value", "16k"), ("unknown-flag", "-ngll")]
    # whisper-server's flags are not unknown in a models: entry.
    assert findings("models:\n  base-en:\n    args: [--language, de, -bs, '5']\n") == ()
    # A global env variable of llama-server's is not misplaced: env reaches every executor.
    assert findings("env:\n  LLAMA_ARG_THREADS: '4'\n") == ()


def test_block_style_lists_give_each_token_its_own_line() -> None:
    text = "engines:\n  llama:\n    args:\n      - --flash-attn\n      - 'on'\n      - --ctx-szie\n"
    f = one(text + "      - '4096'\n", "unknown-flag")
    assert (f.line, f.path) == (6, "$.engines.llama.args[2]")


def test_threads_above_ggml_cap_flagged_by_the_config_checker() -> None:
    text = (
        "env: {LLAMA_ARG_THREADS: '600'}\n"
        "engines:\n  llama:\n    args: [--threads, '100000', -tb, '1000']\n"
        "models:\n  q:\n    args: [--threads-http, '1000', -t, '512']\n"
    )
    found = [(f.code, f.path, f.message) for f in findings(text, "a.yaml")]
    bad = {path: msg for code, path, msg in found if code == "bad-value"}
    flagged = {"$.env.LLAMA_ARG_THREADS", "$.engines.llama.args[1]", "$.engines.llama.args[3]"}
    assert set(bad) == flagged, found
    assert "--threads 100000 is more than 512" in bad["$.engines.llama.args[1]"]
    assert "-tb 1000 is more than 512" in bad["$.engines.llama.args[3]"]
    assert "LLAMA_ARG_THREADS=600: " in bad["$.env.LLAMA_ARG_THREADS"]
