"""Issue 18, items 16 to 19: what a user of RamaLama, Ollama or llama-swap would not accept."""

from __future__ import annotations

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


def test_i18_item16_the_set_ups_executors_are_found_after_path(
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


def test_i18_item16_executors_bin_and_path_come_first(
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


def test_i18_item16_every_not_installed_names_what_installs_it(
    monkeypatch: pytest.MonkeyPatch, no_path: None, run: Run
) -> None:
    monkeypatch.setenv("EXEDRA_EXECUTORS_CACHE", "/nonexistent")
    r = run("plan", "--model", "/m.gguf", "--kind", "llama", "--no-config")
    assert r.code == 2 and INSTALL_HINT in r.err and "--executor PATH" in r.err
    r = run("probe")
    assert r.out.count(f"not installed: {INSTALL_HINT}") == 2
