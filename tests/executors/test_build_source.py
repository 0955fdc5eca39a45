"""`probe` says what a cached build was made from beside the version the binary states: the
llama.cpp that llama-cpp-python 0.3.36 vendors states its own version, not 0.3.36."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exedra_engine._shell.local.executor_cache import SOURCE_FILE, build_source
from tests.conftest import cli


def _build(tmp_path: Path, source: str | None) -> Path:
    """A cached build as scripts/install-executors.sh lays it out: the binary and SOURCE in
    the build's directory, linked from a bin directory."""
    build = tmp_path / "llama-server-0.3.36-abc"
    build.mkdir()
    exe = build / "llama-server"
    exe.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "version: 0.5.0-dev (build 1, commit 0c1e570)"; fi\n'
    )
    exe.chmod(0o755)
    if source is not None:
        (build / SOURCE_FILE).write_text(source)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "llama-server").symlink_to(exe)
    return bin_dir / "llama-server"


def test_build_source_is_read_beside_the_real_binary(tmp_path: Path) -> None:
    link = _build(tmp_path, "llama-cpp-python==0.3.36 vendor/llama.cpp\n")
    assert build_source(str(link)) == "llama.cpp as vendored in llama-cpp-python 0.3.36"


@pytest.mark.parametrize("source", [None, "", "anything at all", "x==1 a b c", "\udcff"])
def test_no_source_or_a_strange_one_says_nothing(tmp_path: Path, source: str | None) -> None:
    if source == "\udcff":
        link = _build(tmp_path, None)
        (Path(os.path.realpath(link)).parent / SOURCE_FILE).write_bytes(b"\xff\xfe")
    else:
        link = _build(tmp_path, source)
    assert build_source(str(link)) == ""


def test_probe_prints_the_build_source_beside_the_stated_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    link = _build(tmp_path, "llama-cpp-python==0.3.36 vendor/llama.cpp\n")
    monkeypatch.setenv("EXEDRA_EXECUTORS_BIN", str(link.parent))
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    r = cli("probe")
    assert r.returncode == 0, r.stderr
    (line,) = [ln for ln in r.stdout.splitlines() if ln.startswith("llama ")]
    assert (
        "version: 0.5.0-dev (build 1, commit 0c1e570); "
        "built from llama.cpp as vendored in llama-cpp-python 0.3.36"
    ) in line
