"""What `launch` prints of itself: where the executor's log goes, the ready lines with a curl
command that names the key's variable (never its value), and the refusal of a flag the
installed binary does not take (cli/launch/launch_output.py). Pure: no process."""

from __future__ import annotations

import argparse
import shlex

from exedra_engine import Kind, ModelSpec
from exedra_engine._core.config.findings import Finding, TableOrigin
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine.cli.launch.launch_output import (
    curl_command,
    kept_log_path,
    log_sink,
    ready_lines,
    refusal,
)
from exedra_engine.errors import ArgumentRefused

KEY = "sk-the-value-never-shown-0123456789"


def _plan(kind: Kind = Kind.LLAMA, *, key: str = "", key_env: str = "", ready: str = "/health"):
    spec = ModelSpec(id="qwen", path="/m/qwen.gguf", kind=kind)
    return LaunchPlan(
        spec=spec,
        command="/usr/bin/exe",
        args=(),
        host="127.0.0.1",
        port=18080,
        api_key=key,
        key_env=key_env,
        ready=ready,
    )


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"log_file": None, "verbose": False, "quiet": False}
    return argparse.Namespace(**{**base, **kw})


def test_the_log_goes_to_a_kept_file_on_a_terminal_and_to_stderr_otherwise(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    p = _plan()
    kept = str(tmp_path / "exedra-engine" / "logs" / "qwen-18080.log")
    assert kept_log_path(p) == kept
    assert log_sink(_args(), p, tty=True).path == kept
    assert log_sink(_args(), p, tty=False).path == ""  # a journal keeps stderr
    assert log_sink(_args(verbose=True), p, tty=True).path == ""
    assert log_sink(_args(quiet=True), p, tty=False).path == kept
    assert log_sink(_args(log_file="/var/log/x.log"), p, tty=True).path == "/var/log/x.log"


def test_the_kept_log_is_named_by_the_model_file_when_the_plan_has_no_id(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    spec = ModelSpec(path="/m/Qwen 2 (7B).gguf", kind=Kind.LLAMA)
    p = LaunchPlan(spec=spec, command="/x", args=(), host="h", port=9, ready="/health")
    assert kept_log_path(p).endswith("/logs/Qwen_2_7B-9.log")


def test_curl_names_the_keys_variable_not_its_value() -> None:
    cmd = curl_command(_plan(key=KEY, key_env="MY_KEY"), "http://127.0.0.1:18080", BUILTIN)
    assert KEY not in cmd
    words = shlex.split(cmd)  # what the shell gives curl, once it expands $MY_KEY
    assert words[:3] == ["curl", "-s", "http://127.0.0.1:18080/v1/completions"]
    assert "Authorization: Bearer $MY_KEY" in words
    assert '"prompt": "The capital of France is"' in words[-1]


def test_curl_without_a_key_sends_no_authorization() -> None:
    cmd = curl_command(_plan(), "http://127.0.0.1:18080", BUILTIN)
    assert "Authorization" not in cmd and "/v1/completions" in cmd


def test_curl_for_a_key_of_unknown_origin_uses_a_placeholder_variable() -> None:
    lines = ready_lines(
        _plan(key=KEY), url="http://h:1", pid=7, sink=log_sink(_args(), _plan(), tty=False),
        executors=BUILTIN,
    )  # fmt: skip
    assert not any(KEY in ln for ln in lines)
    assert any("Bearer $API_KEY" in ln for ln in lines)
    assert any("set API_KEY to the key" in ln for ln in lines)


def test_curl_for_speech_posts_a_file_under_the_plans_path_prefix() -> None:
    cmd = curl_command(_plan(Kind.TRANSCRIBE, ready="/asr/health"), "http://h:1", BUILTIN)
    assert shlex.split(cmd)[2] == "http://h:1/asr/inference" and "file=@audio.wav" in cmd


def test_ready_lines_give_model_endpoint_memory_curl_and_log() -> None:
    sink = log_sink(_args(log_file="/tmp/x.log"), _plan(), tty=True)
    lines = ready_lines(
        _plan(), url="http://127.0.0.1:18080", pid=42, sink=sink, executors=BUILTIN,
        memory=("ctx 4096, estimated: host 1.0 GiB resident",),
    )  # fmt: skip
    assert lines[0] == "ready     qwen at http://127.0.0.1:18080  (pid 42); Ctrl-C stops it"
    assert lines[1] == "memory    ctx 4096, estimated: host 1.0 GiB resident"
    assert lines[2].startswith("try       curl -s http://127.0.0.1:18080/v1/completions")
    assert lines[3].startswith("auth      unauthenticated: anyone who reaches its address")
    assert lines[4].startswith("log       /tmp/x.log  (--log-file")


def _finding(severity: str, token: str, suggestion: str = "") -> Finding:
    return Finding(
        severity=severity,  # type: ignore[arg-type]
        code="unknown-flag" if severity == "error" else "equals-form",
        file="/etc/exedra/engine.yaml",
        line=3,
        path="$.engines.llama.args[0]",
        token=token,
        message=f"no flag {token}",
        suggestion=suggestion,
    )


BINARY = TableOrigin(kind="llama", binary="llama-server", source="binary", path="/bin/ls")


def test_an_error_by_the_binarys_own_table_refuses_with_flag_and_layer() -> None:
    err = refusal([_finding("warning", "--a=1"), _finding("error", "--ctx-szie", "--ctx-size"),
                   _finding("error", "--bogus")], BINARY)  # fmt: skip
    assert isinstance(err, ArgumentRefused)
    assert err.flag == "--ctx-szie" and err.suggestion == "--ctx-size"
    assert err.layer == "/etc/exedra/engine.yaml:3: $.engines.llama.args[0]"
    assert "nothing was started" in str(err) and "and 1 more" in str(err)
    assert "/bin/ls --help" in str(err)


def test_the_bundled_table_or_warnings_alone_refuse_nothing() -> None:
    bundled = TableOrigin(kind="llama", binary="llama-server", source="bundled")
    assert refusal([_finding("error", "--bogus")], bundled) is None
    assert refusal([_finding("warning", "--a=1")], BINARY) is None
