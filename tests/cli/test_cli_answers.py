"""Issue 18, items 10 to 13: answers that were wrong or silent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exedra_engine import config_from_yaml
from exedra_engine._core.executors.builtin import executor_profile
from exedra_engine._core.executors.kinds import Kind
from exedra_engine._shell.local import flag_tables
from tests.conftest import FAKE, Run

PLAN = ["plan", "--model", "/m.gguf", "--kind", "llama", "--no-config", "--executor", str(FAKE)]


@pytest.mark.parametrize("value", ["hello", '"--ctx-size 4096"'])
def test_args_as_a_string_is_named_a_string(value: str, tmp_path: Path, run: Run) -> None:
    f = tmp_path / "args.yaml"
    f.write_text(f"engines:\n  llama:\n    args: {value}\n")
    r = run("config", str(f))
    assert r.code == 2 and r.err.count("\n") == 1
    assert "args: must be a list of strings, not a string (one item per argument" in r.err
    said = str(config_from_yaml(f.read_text(), str(f)).failure())
    assert "not a string" in said and "None" not in said


def test_a_mapping_given_a_string_is_named_a_string(tmp_path: Path, run: Run) -> None:
    f = tmp_path / "eng.yaml"
    f.write_text("engines:\n  llama: hello\n")
    r = run("config", str(f))
    assert r.code == 2 and "must be a mapping, not a string" in r.err, r.err


@pytest.mark.parametrize(
    "argv",
    [
        ["config", "--check", "{missing}"],
        ["config", "{missing}"],
        [*PLAN, "--config", "{missing}"],
        ["launch", "--model", "/m.gguf", "--kind", "llama", "--config", "{missing}"],
    ],
)
def test_a_named_config_path_must_exist(argv: list[str], tmp_path: Path, run: Run) -> None:
    missing = str(tmp_path / "engine.dd")
    r = run(*[a.replace("{missing}", missing) for a in argv])
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert f"{missing} does not exist (only the default" in r.err
    assert r.out == ""


def test_the_default_config_path_may_be_absent(run: Run) -> None:
    # Nothing names a path: the default, absent on a host without overrides, reads as empty.
    r = run("config", "--json")
    assert r.code in (0, 2)  # 2 only if this host's default exists and is broken
    if not os.path.lexists("/etc/exedra/engine.d"):
        assert r.code == 0, r.err


@pytest.mark.parametrize("model_id", ["a,b", " lead"])
def test_plan_id_gets_the_finding_config_check_gives(
    model_id: str, tmp_path: Path, run: Run
) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(f'models:\n  "{model_id}":\n    args: [--ctx-size, "64"]\n')
    checked = run("config", "--check", str(f))
    assert checked.code == 1 and "[bad-model-id]" in checked.out + checked.err
    r = run(*PLAN, "--id", model_id, "--explain")
    assert r.code == 0
    line = next(ln for ln in r.out.splitlines() if "[bad-model-id]" in ln)
    assert line.strip().startswith("caller id: error: model id")
    assert run(*PLAN, "--id", model_id, "--strict").code == 2
    assert "1 error" in run(*PLAN, "--id", model_id).err


def _hanging(tmp_path: Path) -> tuple[Path, Path]:
    calls = tmp_path / "calls"
    b = tmp_path / "bin" / "llama-server"
    b.parent.mkdir()
    b.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec sleep 30\n')
    b.chmod(0o755)
    return b, calls


def test_a_help_that_timed_out_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(flag_tables, "TIMEOUT", 0.4)
    b, calls = _hanging(tmp_path)
    llama = executor_profile(Kind.LLAMA)
    for n in (1, 2):
        _, origin = flag_tables.executor_table(llama, str(b))
        assert origin.source == "bundled" and "did not exit within 0.4 s" in origin.note
        assert calls.read_text().count("--help") == n  # not the cached timeout
    # A binary that answers once is cached as before.
    b.write_text("#!/bin/sh\necho 'version: 1 (abc)'\n")
    flag_tables.executor_version(llama, str(b))
    flag_tables.executor_version(llama, str(b))
    assert list((tmp_path / "cache" / "exedra-engine" / "flag-tables").iterdir())


def test_probe_says_a_hung_executor_is_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Run
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(flag_tables, "TIMEOUT", 0.8)
    monkeypatch.setattr(flag_tables, "SLOW", 0.2)
    b, calls = _hanging(tmp_path)
    monkeypatch.setenv("PATH", f"{b.parent}{os.pathsep}/usr/bin:/bin")
    for n in (1, 2):
        r = run("probe")
        assert r.code == 0, r.err
        assert f"note: waiting for {b} --version to answer (given up after 0.8 s)" in r.err
        line = next(ln for ln in r.out.splitlines() if ln.startswith("llama"))
        assert f"version: not stated ({b} --version did not exit within 0.8 s" in line
        assert calls.read_text().count("--version") == n
