"""A dry run for another host runs nothing that host's hardware file names: ``plan --hardware
FILE --explain`` and ``--strict`` judge the layers by the flags the file records (``probe
--json --flags`` there), else by the bundled table, saying why."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import msgspec
import pytest

from exedra_engine import CPU, Device, ExecutorInfo, Hardware, Kind
from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._shell.hardware_file import read_hardware
from exedra_engine.errors import HardwareFileError
from tests.conftest import Run


def _trap(tmp_path: Path) -> tuple[Path, Path]:
    """An executable that records having been run: the binary another host's file names."""
    ran = tmp_path / "ran"
    exe = tmp_path / "llama-server"
    exe.write_text(f"#!/bin/sh\necho \"$@\" >> {ran}\necho 'version: 1 (x)'\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe, ran


def _hw_file(tmp_path: Path, exe: Path, flags: tuple[object, ...] = ()) -> Path:
    hw = Hardware(
        cpu=CPU(threads=4, ram=1 << 33),
        executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(exe), version="b1", flags=flags),),  # type: ignore[arg-type]
    )
    path = tmp_path / "other.json"
    path.write_bytes(msgspec.json.encode(hw))
    return path


@pytest.mark.parametrize("mode", ["--explain", "--strict"])
def test_plan_for_another_host_never_runs_the_binary_its_file_names(
    run: Run, tiny_llama: Path, tmp_path: Path, mode: str
) -> None:
    exe, ran = _trap(tmp_path)
    hw = _hw_file(tmp_path, exe)
    r = run("plan", "--model", str(tiny_llama), "--kind", "llama", "--hardware", str(hw),
            "--no-port-check", "--no-config", mode)  # fmt: skip
    assert r.code == 0, r.err
    assert not ran.exists(), f"ran {ran.read_text()!r}"
    if mode == "--explain":
        assert "the bundled table" in r.out
        assert f"{hw} records no flags of {exe}" in r.out
        assert "probe --json --flags" in r.out


def test_plan_for_another_host_judges_by_the_flags_its_probe_recorded(
    run: Run, tiny_llama: Path, tmp_path: Path
) -> None:
    exe, ran = _trap(tmp_path)
    # That host's binary knows one flag this library's table lacks, and lacks --temp.
    rows = ((("--only-there",), (), 1, (), "int"), (("--port",), (), 1, (), "int"))
    hw = _hw_file(tmp_path, exe, rows)
    base = ("plan", "--model", str(tiny_llama), "--kind", "llama", "--hardware", str(hw),
            "--no-port-check", "--no-config", "--explain", "--json")  # fmt: skip
    r = run(*base, "--arg=--only-there", "--arg=3", "--arg=--temp", "--arg=0.5")
    assert r.code == 0, r.err
    assert not ran.exists()
    doc = json.loads(r.out)
    assert doc["flag_table"]["source"] == "recorded"
    assert doc["flag_table"]["path"] == str(exe)
    tokens = {f["token"] for f in doc["findings"]}
    assert "--temp" in tokens and "--only-there" not in tokens


def test_probe_json_flags_records_the_binarys_parsed_help(run: Run, llama_server: str) -> None:
    r = run("probe", "--json", "--flags", env={"PATH": os.path.dirname(llama_server)})
    assert r.code == 0, r.err
    llama = next(e for e in json.loads(r.out)["executors"] if e["kind"] == "llama")
    names = {n for row in llama["flags"] for n in row[0]}
    assert {"--ctx-size", "--n-gpu-layers", "--port"} <= names
    plain = run("probe", "--json", env={"PATH": os.path.dirname(llama_server)})
    assert all("flags" not in e for e in json.loads(plain.out)["executors"])


@pytest.mark.parametrize(
    ("row", "said"),
    [
        ((("--ok\x1b[2J",), (), 1, (), ""), "is not a flag name"),
        ((("--a",), (), 7, (), ""), "nargs 7"),
        ((("--a",), (), 1, ("lower",), ""), "is not a variable name"),
        ((("--a",), (), 1, (), "x" * 5000), "printable text"),
        (((), (), 0, (), ""), "1 to 16 flags"),
    ],
)
def test_a_recorded_flag_table_of_hostile_shape_is_refused_naming_the_row(
    tmp_path: Path, row: tuple[object, ...], said: str
) -> None:
    hw = _hw_file(tmp_path, Path("/opt/x/llama-server"), (row,))
    with pytest.raises(HardwareFileError) as e:
        read_hardware(hw)
    assert "$.executors[0].flags[0]" in str(e.value) and said in str(e.value)
    assert "\x1b" not in str(e.value)


def test_a_recorded_flag_table_is_bounded(tmp_path: Path) -> None:
    rows = tuple(((f"--f{i}",), (), 0, (), "") for i in range(3000))
    with pytest.raises(HardwareFileError, match="more than 2048"):
        read_hardware(_hw_file(tmp_path, Path("/opt/x/llama-server"), rows))


def test_the_bundled_llama_table_passes_the_recorded_table_check(tmp_path: Path) -> None:
    from exedra_engine._core.executors._flagdata import LLAMA_FLAGS as ROWS

    assert LLAMA.binary == "llama-server"
    hw = read_hardware(_hw_file(tmp_path, Path("/opt/x/llama-server"), ROWS))
    assert len(hw.executors[0].flags) == len(ROWS)


def test_a_group_plan_for_another_host_never_runs_the_binary_its_file_names(
    run: Run, tiny_llama: Path, tmp_path: Path
) -> None:
    exe, ran = _trap(tmp_path)
    hw = _hw_file(tmp_path, exe)
    group = tmp_path / "group.yaml"
    group.write_text(
        f"members:\n  - {{id: a, model: {tiny_llama}, ctx: 256}}\n"
        f"  - {{id: b, model: {tiny_llama}, ctx: 256}}\n"
    )
    for extra in ((), ("--json",)):
        r = run("plan", "--group", str(group), "--hardware", str(hw), "--no-port-check",
                "--no-config", "--explain", *extra)  # fmt: skip
        assert r.code == 0, r.err
        assert not ran.exists(), f"ran {ran.read_text()!r}"


def test_devices_a_hardware_file_records_are_planned_with_and_nothing_runs(
    run: Run, tiny_llama: Path, tmp_path: Path
) -> None:
    exe, ran = _trap(tmp_path)
    lavapipe = Device(name="Vulkan0", description="llvmpipe", total=2 << 30, free=2 << 30)
    info = ExecutorInfo(kind=Kind.LLAMA, path=str(exe), version="b1", devices=(lavapipe,))
    path = tmp_path / "vulkan.json"
    path.write_bytes(
        msgspec.json.encode(Hardware(cpu=CPU(threads=4, ram=1 << 33), executors=(info,)))
    )
    r = run("plan", "--model", str(tiny_llama), "--kind", "llama", "--hardware", str(path),
            "--no-port-check", "--no-config", "--explain", "--json")  # fmt: skip
    assert r.code == 0, r.err
    assert not ran.exists(), f"ran {ran.read_text()!r}"
    doc = json.loads(r.out)
    assert "--n-gpu-layers" not in doc["plan"]["args"]
    assert doc["plan"]["memory"]["devices"][0]["name"] == "Vulkan0"
