"""Judging by the installed binary: its own --help, parsed by the code that made the bundled
tables, cached per binary; probe records each executor's version (issue 13)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from exedra_engine import Kind
from exedra_engine._core.executors import _flagdata
from exedra_engine._core.executors.builtin import executor_profile
from exedra_engine._core.executors.helptext import parse_help, rows_from_help, version_from
from exedra_engine._shell.local import flag_tables
from exedra_engine._shell.local.flag_tables import cache_dir, executor_table, executor_version
from exedra_engine._shell.probe import probe
from tests.conftest import Run

ROOT = Path(__file__).resolve().parents[2]
LLAMA = executor_profile(Kind.LLAMA)
WHISPER = executor_profile(Kind.TRANSCRIBE)


def _reference() -> Path | None:
    for base in (ROOT.parent, ROOT.parent.parent):
        ref = base / "shared" / "reference"
        if ref.is_dir():
            return ref
    return None


REFERENCE = _reference()
needs_reference = pytest.mark.skipif(REFERENCE is None, reason="no reference help texts")


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "exedra-engine" / "flag-tables"


def fake_binary(directory: Path, name: str, help_text: str, version: str = "") -> Path:
    """A stand-in executor that prints `help_text` for --help and `version` for --version."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "help.txt").write_text(help_text)
    (directory / "version.txt").write_text(f"version: {version}\n" if version else "")
    b = directory / name
    b.write_text(
        "#!/bin/sh\n"
        f'case "$1" in --version) cat "{directory}/version.txt" >&2;; '
        f'*) cat "{directory}/help.txt";; esac\n'
    )
    b.chmod(b.stat().st_mode | stat.S_IXUSR)
    return b


# -- the parser: one for the bundled tables and for live help -----------------------------


@needs_reference
def test_the_bundled_tables_are_the_parsers_output_of_the_reference_help() -> None:
    assert REFERENCE is not None
    text = (REFERENCE / "llama-server-help.txt").read_text()
    assert rows_from_help(LLAMA, text) == _flagdata.LLAMA_FLAGS
    text = (REFERENCE / "whisper-server-help.txt").read_text()
    assert rows_from_help(WHISPER, text) == _flagdata.WHISPER_FLAGS


def test_value_types_come_from_the_placeholder_and_the_default() -> None:
    text = (
        "-c,    --ctx-size N                     size of the prompt context (default: 0)\n"
        "--temp N                                temperature (default: 0.80)\n"
        "--rope-scale N                          RoPE context scaling factor\n"
        "-ngl,  --n-gpu-layers N                 an exact number, 'auto', or 'all'\n"
        "                                        (default: auto)\n"
        "--rope-scaling {none,linear,yarn}       RoPE frequency scaling method\n"
        "--cpu-strict <0|1>                      use strict CPU placement (default: 0)\n"
        "-m,    --model FNAME                    model path\n"
    )
    takes = {r[0][-1]: r[4] for r in parse_help("llama.cpp", text)}
    assert takes == {
        "--ctx-size": "int",
        "--temp": "float",
        "--rope-scale": "number",
        "--n-gpu-layers": "",
        "--rope-scaling": "choice:none,linear,yarn",
        "--cpu-strict": "int",
        "--model": "",
    }


def test_version_text() -> None:
    assert version_from("version: 0.5.0-dev (build 1, commit 0c1e570)\nbuilt with GNU\n") == (
        "0.5.0-dev (build 1, commit 0c1e570)"
    )
    assert version_from("error: unknown argument: --version\nusage: whisper-server\n") == ""


# -- the real binaries ----------------------------------------------------------------------


def test_the_real_llama_server_is_read_by_its_own_help(llama_server: str) -> None:
    table, origin = executor_table(LLAMA, llama_server)
    assert origin.source == "binary" and origin.path == llama_server
    assert origin.version == executor_version(LLAMA, llama_server) != ""
    assert table.lookup("--ctx-size") is not None and table.flags["--ctx-size"].takes == "int"
    assert len(table.flags) > 200


def test_the_real_whisper_server_is_read_by_its_own_help(whisper_server: str) -> None:
    # whisper-server prints its help on stderr, and has no --version.
    table, origin = executor_table(WHISPER, whisper_server)
    assert origin.source == "binary" and origin.version == ""
    assert table.flags["--threads"].takes == "int"
    assert "version not stated" in origin.describe()


def test_probe_records_the_versions(
    llama_server: str, whisper_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{Path(llama_server).parent}:{os.environ['PATH']}")
    hw = probe().unwrap()
    llama = hw.executor(Kind.LLAMA)
    whisper = hw.executor(Kind.TRANSCRIBE)
    assert llama is not None and whisper is not None
    assert llama.version == version_from(os.popen(f"{llama_server} --version 2>&1").read())
    assert llama.version and whisper.version == ""


def test_probe_json_omits_an_empty_version(
    llama_server: str, monkeypatch: pytest.MonkeyPatch, run: Run
) -> None:
    monkeypatch.setenv("PATH", f"{Path(llama_server).parent}:{os.environ['PATH']}")
    data = json.loads(run("probe", "--json").out)
    by_kind = {e["kind"]: e for e in data["executors"]}
    assert by_kind["llama"]["version"]
    assert "version" not in by_kind["transcribe"]


def test_the_installed_binary_changes_the_verdict(
    llama_server: str, tmp_path: Path, run: Run
) -> None:
    # The installed build and the bundled table's differ: each knows flags the other lacks.
    live, _ = executor_table(LLAMA, llama_server)
    only_live = sorted(k for k in live.flags if LLAMA.flags.lookup(k) is None)
    only_bundled = sorted(k for k in LLAMA.flags.flags if live.lookup(k) is None)
    if not only_live or not only_bundled:
        pytest.skip("the installed llama-server has the bundled table's flags")
    f = tmp_path / "10.yaml"
    f.write_text(f"engines:\n  llama:\n    args: [{only_bundled[0]}]\n")
    with_binary = run("config", "--check", str(f), "--executor", llama_server)
    assert with_binary.code == 1, with_binary.out
    assert f"{f}:3: error: $.engines.llama.args[0]: llama-server has no flag {only_bundled[0]}" in (
        with_binary.out
    )
    assert f"judged by llama-server: {llama_server} --help, version" in with_binary.out


# -- a help text with one flag added and one removed --------------------------------------


@needs_reference
def test_a_flag_added_and_a_flag_removed_change_the_verdict(tmp_path: Path, run: Run) -> None:
    assert REFERENCE is not None
    ref = (REFERENCE / "llama-server-help.txt").read_text()
    assert "\n--mlock " in ref
    lines = ref.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if ln.startswith("--mlock "))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("-"))
    added = "--turbo N                               go faster (default: 1)\n"
    text = "".join([*lines[:start], added, *lines[end:]])
    binary = fake_binary(tmp_path / "b9999", "llama-server", text, "9.9.9 (test)")
    f = tmp_path / "10.yaml"
    f.write_text("engines:\n  llama:\n    args: [--mlock, --turbo, '2']\n")

    bundled = run("config", "--check", str(f), "--json", "--executor", "llama=/bin/true")
    assert [(d["code"], d["token"]) for d in json.loads(bundled.out)] == [
        ("unknown-flag", "--turbo")
    ]
    assert "the bundled table, made from build 0.10434 (/bin/true --help listed no flags)" in (
        bundled.err
    )

    live = run("config", "--check", str(f), "--executor", str(binary))
    assert live.code == 1
    assert live.out.splitlines()[0] == (
        f"{f}:3: error: $.engines.llama.args[0]: llama-server has no flag --mlock: the planner "
        "passes it through as written and llama-server refuses to start on it [unknown-flag]"
    )
    assert "--turbo" not in live.out
    assert f"judged by llama-server: {binary} --help, version 9.9.9 (test)" in live.out

    f.write_text("engines:\n  llama:\n    args: [--turbo, 2x]\n")
    r = run("config", "--check", str(f), "--executor", str(binary))
    assert "--turbo takes an integer: llama-server reads '2x' as 2" in r.out


def test_the_parse_is_cached_per_binary_path_size_and_mtime(tmp_path: Path, cache: Path) -> None:
    help_text = "-c,    --ctx-size N                     size (default: 0)\n"
    b = fake_binary(tmp_path / "bin", "llama-server", help_text, "1")
    table, origin = executor_table(LLAMA, str(b))
    assert set(table.flags) == {"--ctx-size"} and origin.version == "1"
    entries = list(cache.iterdir())
    assert len(entries) == 1 and entries[0].suffix == ".json"
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]

    # A cached binary is not run again: with its help text gone, the table stays.
    (tmp_path / "bin" / "help.txt").write_text("")
    assert set(executor_table(LLAMA, str(b))[0].flags) == {"--ctx-size"}

    # Replaced in place (another size, another time): asked again.
    b.write_text(b.read_text() + "# rebuilt\n")
    table, origin = executor_table(LLAMA, str(b))
    assert origin.source == "bundled" and "listed no flags" in origin.note
    assert len(list(cache.iterdir())) == 2


def test_a_corrupt_cache_entry_is_a_miss(tmp_path: Path, cache: Path) -> None:
    b = fake_binary(tmp_path / "bin", "llama-server", "--keep N     keep (default: 0)\n")
    executor_table(LLAMA, str(b))
    (entry,) = cache.iterdir()
    entry.write_text("{not json")
    table, _ = executor_table(LLAMA, str(b))
    assert set(table.flags) == {"--keep"}


def test_a_binary_that_serves_instead_of_answering_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flag_tables, "TIMEOUT", 0.5)
    b = tmp_path / "llama-server"
    b.write_text("#!/bin/sh\nsleep 30 &\nwait\n")
    b.chmod(0o755)
    table, origin = executor_table(LLAMA, str(b))
    assert table is LLAMA.flags
    assert origin.source == "bundled" and "did not exit within 0.5 s" in origin.note


def test_an_unwritable_cache_still_judges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))  # a file: no directory can be made in it
    b = fake_binary(tmp_path / "bin", "llama-server", "--keep N     keep (default: 0)\n")
    assert set(executor_table(LLAMA, str(b))[0].flags) == {"--keep"}
    assert cache_dir().startswith(str(blocked))


def test_executor_option_errors(tmp_path: Path, run: Run) -> None:
    r = run("config", "--check", str(tmp_path), "--executor", str(tmp_path / "missing"))
    assert r.code == 2 and "cannot tell its kind" in r.err
    r = run("config", "--check", str(tmp_path), "--executor", "llama=" + str(tmp_path / "nope"))
    assert r.code == 2 and "is not an executable file" in r.err
