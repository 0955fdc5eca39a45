"""Issue 18, items 16 to 19: what a user of RamaLama, Ollama or llama-swap would not accept."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from exedra_engine import Kind
from exedra_engine._shell.probe import host_hardware
from exedra_engine.constants import INSTALL_HINT
from tests.conftest import FAKE, HOSTS, Run


def _cache_with_llama(root: Path) -> Path:
    """An executor cache as scripts/install-executors.sh lays it out: bin/<hash>/llama-server."""
    d = root / "bin" / "0123456789ab"
    d.mkdir(parents=True)
    (root / "bin" / ".tmp.half-made").mkdir()
    shutil.copy(FAKE, d / "llama-server")
    return d / "llama-server"


@pytest.fixture
def no_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(HOSTS / "none"))
    monkeypatch.delenv("EXEDRA_EXECUTORS_BIN", raising=False)


def test_the_set_ups_executors_are_found_after_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_path: None, run: Run
) -> None:
    cache = tmp_path / "xdg" / "exedra-engine" / "executors"
    exe = _cache_with_llama(cache)
    monkeypatch.delenv("EXEDRA_EXECUTORS_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    hw = host_hardware()
    found = hw.executor(Kind.LLAMA)
    assert found is not None and found.path == str(exe)
    r = run("probe")
    line = next(ln for ln in r.out.splitlines() if ln.startswith("llama"))
    assert f"(not on PATH: found in the executor cache ({cache / 'bin'}))" in line
    assert f"not installed: {INSTALL_HINT}" in r.out  # whisper-server is in no cache
    # EXEDRA_EXECUTORS_CACHE moves the cache, as it moves the script's.
    monkeypatch.setenv("EXEDRA_EXECUTORS_CACHE", str(tmp_path / "elsewhere"))
    assert host_hardware().executor(Kind.LLAMA) is None
    monkeypatch.setenv("EXEDRA_EXECUTORS_CACHE", str(cache))
    assert run("plan", "--model", "/m.gguf", "--kind", "llama", "--no-config").code == 0


def test_executors_bin_and_path_come_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_path: None, run: Run
) -> None:
    cache = tmp_path / "cache"
    _cache_with_llama(cache)
    monkeypatch.setenv("EXEDRA_EXECUTORS_CACHE", str(cache))
    named = tmp_path / "named"
    named.mkdir()
    shutil.copy(FAKE, named / "llama-server")
    monkeypatch.setenv("EXEDRA_EXECUTORS_BIN", str(named))
    found = host_hardware().executor(Kind.LLAMA)
    assert found is not None and found.path == str(named / "llama-server")
    assert "found in the executor cache ($EXEDRA_EXECUTORS_BIN)" in run("probe").out
    on_path = tmp_path / "on-path"
    on_path.mkdir()
    shutil.copy(FAKE, on_path / "llama-server")
    monkeypatch.setenv("PATH", str(on_path))
    found = host_hardware().executor(Kind.LLAMA)
    assert found is not None and found.path == str(on_path / "llama-server")
    assert "not on PATH" not in run("probe").out


def test_every_not_installed_names_what_installs_it(
    monkeypatch: pytest.MonkeyPatch, no_path: None, run: Run
) -> None:
    monkeypatch.setenv("EXEDRA_EXECUTORS_CACHE", "/nonexistent")
    r = run("plan", "--model", "/m.gguf", "--kind", "llama", "--no-config")
    assert r.code == 2 and INSTALL_HINT in r.err and "--executor PATH" in r.err
    r = run("probe")
    assert r.out.count(f"not installed: {INSTALL_HINT}") == 2


def test_a_bare_call_prints_usage_and_the_commands(run: Run) -> None:
    r = run()
    assert r.code == 2 and r.out == ""
    assert r.err.startswith("usage: exedra-engine")
    for command in ("probe", "plan", "launch", "demo"):
        assert f"\n    {command}" in r.err


def _launch_fake(tiny_llama: Path, *extra: str) -> list[str]:
    base = ["launch", "--model", str(tiny_llama), "--kind", "llama", "--no-config"]
    return [*base, "--executor", str(FAKE), *extra]


@pytest.mark.parametrize("how", ["--quiet", "--log-file"])
def test_launch_quiet_and_log_file(
    how: str, tiny_llama: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Run
) -> None:
    # An executor that dies during its load: its logs go where asked, its last lines still
    # explain the failure on stderr.
    monkeypatch.setenv("FAKE_MODE", "die")
    log = tmp_path / "exec.log"
    log.write_text("earlier run\n")
    extra = ["--quiet"] if how == "--quiet" else ["--log-file", str(log)]
    r = run(*_launch_fake(tiny_llama, *extra))
    assert r.code == 1
    forwarded = [ln for ln in r.err.splitlines() if ln.startswith("fake executor:")]
    assert forwarded == []
    assert "exited before it was ready" in r.err and "fake executor: mode die" in r.err
    if how == "--log-file":
        text = log.read_text()
        assert text.startswith("earlier run\n")  # appended to
        assert "fake executor: mode die" in text


def test_a_long_load_says_it_is_loading(
    tiny_llama: Path, monkeypatch: pytest.MonkeyPatch, run: Run
) -> None:
    import exedra_engine.cli.launch.launch_run as launch_cli

    monkeypatch.setattr(launch_cli, "PROGRESS_EVERY", 0.2)
    monkeypatch.setattr(launch_cli, "SHOW_AFTER", 0.0)
    monkeypatch.setenv("FAKE_MODE", "hang")  # never ready, maps nothing
    r = run(*_launch_fake(tiny_llama, "--quiet", "--ready-timeout", "1.1"))
    assert r.code == 1
    progress = [ln for ln in r.err.splitlines() if ln.startswith("loading   ")]
    assert len(progress) >= 3, r.err
    # The first sample: nothing of the model in yet; then, with no new step, the time.
    assert "  0 % of " in progress[0], progress
    assert any(
        "has not answered /health yet: " in ln and " s of --ready-timeout 1.1 s" in ln
        for ln in progress[1:]
    ), progress


@pytest.mark.parametrize(
    "extra",
    [
        ["--out", "d"],
        ["--check"],
        ["--name", "qwen-unit"],
        ["--uid", "5"],
        ["--out", "d", "--check"],
    ],
)
def test_plan_refuses_emit_options_without_emit(
    extra: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Run
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["plan", "--model", "/m.gguf", "--kind", "llama", "--no-config", "--executor"]
    r = run(*argv, str(FAKE), *extra)
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    named = [t for t in extra if t.startswith("--")]
    assert r.err.startswith(f"exedra-engine: error: {', '.join(named)} go")
    assert "with --emit" in r.err and r.out == ""
    assert not (tmp_path / "d").exists()
    # With --emit they are what they were.
    r = run(*argv, str(FAKE), "--host", "0.0.0.0", "--port", "8080", "--emit", "k8s", *extra)
    assert "go with --emit" not in r.err


def test_cpu_only_plans_say_why_and_that_the_warning_is_expected(
    tiny_llama: Path, llama_server: str, run: Run
) -> None:
    import subprocess
    import time

    from exedra_engine import probe

    if probe().unwrap().gpus:
        pytest.skip("a host with a GPU: plans do not pin the model to the CPU here")
    r = run(
        "plan", "--model", str(tiny_llama), "--kind", "llama", "--no-config", "--executor",
        llama_server, "--explain",
    )  # fmt: skip
    assert r.code == 0
    assert "--n-gpu-layers 0" in r.out
    assert "note: --n-gpu-layers 0 keeps the model on the CPU" in r.out
    assert "warning of the executor about no usable GPU is expected" in r.out
    # What the note is about: llama-server warns for the flag, and only for it.
    said = {}
    for flags in ([], ["--n-gpu-layers", "0"]):
        p = subprocess.Popen(
            [llama_server, "--model", str(tiny_llama), "--port", "0", *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        time.sleep(1.5)
        p.terminate()
        said[bool(flags)] = "no usable GPU found" in p.communicate(timeout=20)[0]
    assert said == {False: False, True: True}


_COMPLETE = """
source <("$PY" -m exedra_engine completion bash)
complete_words() {
    COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
    _shtab_exedra_engine
    printf '%s\\n' "${COMPREPLY[@]}" | sort
}
"""


@pytest.mark.parametrize(
    ("words", "want"),
    [
        (["pl"], ["plan"]),
        (["co"], ["completion", "config"]),
        (["launch", "--qu"], ["--quiet"]),
        (["launch", "--log"], ["--log-file"]),
        (["plan", "--kind", ""], ["llama", "transcribe"]),
        (["completion", ""], ["bash", "zsh"]),
        (["launch", "--model", "mo"], ["models", "models.txt"]),
        (["plan", "--emit", "k8s", "--out", "mo"], ["models"]),
    ],
)
def test_completion_is_generated_from_the_parser(
    words: list[str], want: list[str], tmp_path: Path
) -> None:
    import subprocess
    import sys

    (tmp_path / "models").mkdir()
    (tmp_path / "models.txt").write_text("")  # a file: not offered where a directory is
    quoted = " ".join(f"'{w}'" for w in ["exedra-engine", *words])
    script = _COMPLETE + f"complete_words {quoted}\n"
    r = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env={**os.environ, "PY": sys.executable},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    got = [ln for ln in r.stdout.splitlines() if ln]
    assert got == want, (words, got)


def test_completion_scripts_for_bash_and_zsh(run: Run) -> None:
    import subprocess

    for shell in ("bash", "zsh"):
        r = run("completion", shell)
        assert r.code == 0 and r.err == ""
        # Every subcommand and every option of launch is in the script.
        for word in ("probe", "wait-ready", "completion", "--ready-timeout", "--log-file"):
            assert word in r.out, (shell, word)
    bash = run("completion", "bash").out
    assert subprocess.run(["bash", "-n"], input=bash, text=True, check=False).returncode == 0
    if shutil.which("zsh"):
        zsh = run("completion", "zsh").out
        assert subprocess.run(["zsh", "-n"], input=zsh, text=True, check=False).returncode == 0


def test_another_kinds_executor_is_refused(run: Run, tiny_llama: Path, whisper_server: str) -> None:
    r = run(
        "plan",
        "--model",
        str(tiny_llama),
        "--kind",
        "llama",
        "--no-config",
        "--executor",
        whisper_server,
    )
    assert r.code == 2
    assert "whisper-server is the executor of kind transcribe, not of kind llama" in r.err
