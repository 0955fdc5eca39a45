"""Planning for another host: `probe --json` there, `plan --hardware FILE` anywhere.

Every fixture tree is probed, written as the probe's JSON, and planned from the file alone;
a broken file is an error that names the file and the field."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import psutil
import pytest

from exedra_engine import Kind, LaunchPlan
from exedra_engine._core.host.hardware_file import hardware_from_json
from exedra_engine._shell.hardware_file import load_hardware
from exedra_engine._shell.probe import probe
from exedra_engine.errors import HardwareFileError
from tests.conftest import HOSTS, Run, cli, eight_threads, host

TREES = sorted(p.name for p in HOSTS.iterdir() if p.is_dir())


def _plan_args(hw_file: Path, *extra: str) -> list[str]:
    return [
        "plan",
        "--hardware",
        str(hw_file),
        "--model",
        "/var/lib/exedra/models/qwen/model.gguf",
        "--kind",
        "llama",
        "--no-config",
        "--port",
        "8080",
        "--no-port-check",
        "--json",
        *extra,
    ]


def test_every_fixture_tree_is_found() -> None:
    assert {"amdgpu", "intel-xe", "intel-arc-dkms", "nvidia", "laptop-two-gpus", "none"} <= set(
        TREES
    )


@pytest.mark.parametrize("tree", TREES)
def test_plan_from_the_hardware_file_of_each_fixture_host(
    tree: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hw = probe(host(tree)).unwrap()
    f = tmp_path / f"{tree}.json"
    f.write_bytes(msgspec.json.encode(hw))

    def no_probe(*_: object) -> None:
        raise AssertionError("planning with --hardware must not probe this machine")

    monkeypatch.setattr("exedra_engine.cli.plan.request.host_hardware", no_probe)
    exe = hw.executor(Kind.LLAMA)
    extra = () if exe else ("--executor", "/usr/bin/llama-server")
    code, out, err = cli(*_plan_args(f, *extra))
    assert code == 0, err
    plan = msgspec.json.decode(out, type=LaunchPlan)
    assert plan.command == (exe.path if exe else "/usr/bin/llama-server")
    gpu_plan = bool(hw.gpus) and exe is not None and exe.has_gpu_backend()
    assert ("--n-gpu-layers" not in plan.args) == gpu_plan, (tree, plan.args)


def test_a_file_with_a_gpu_backend_plans_for_the_gpu_this_machine_lacks(tmp_path: Path) -> None:
    f = tmp_path / "nvidia.json"
    f.write_bytes(msgspec.json.encode(probe(host("nvidia")).unwrap()))
    code, out, _ = cli(*_plan_args(f))
    assert code == 0
    plan = json.loads(out)
    assert plan["command"] == "/usr/bin/llama-server"
    assert "--n-gpu-layers" not in plan["args"]
    # the same request for this CPU-only machine is a CPU plan
    code, out, _ = cli(*_plan_args(f, "--no-gpu"))
    args = json.loads(out)["args"]
    assert args[args.index("--n-gpu-layers") + 1] == "0"


def test_what_probe_json_prints_decodes_unchanged() -> None:
    code, out, _ = cli("probe", "--json")
    assert code == 0
    hw = hardware_from_json(out, "probe.json")
    assert msgspec.json.decode(msgspec.json.encode(hw)) == json.loads(out)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"cpu": {"threads": "8"}}', "host.json: $.cpu.threads: Expected `int`, got `str`"),
        ("{}", "host.json: $: Object missing required field `cpu`"),
        (
            '{"cpu": {"threads": 8}, "gpus": [{"card": "card0", "driver": "xe", "vram": -1}]}',
            "host.json: $.gpus[0].vram: -1 is not a size in bytes",
        ),
        (
            '{"cpu": {"threads": 8}, "gpus": [{"card": "card0", "drivr": "xe"}]}',
            "host.json: $.gpus[0]: Object contains unknown field `drivr`",
        ),
        (
            '{"cpu": {"threads": 8}, "executors": [{"kind": "llamas", "path": "/x"}]}',
            "host.json: $.executors[0].kind: unknown kind 'llamas' (known: llama, transcribe)",
        ),
        ('{"cpu": {"threads": 0}}', "host.json: $.cpu.threads: 0 is not a thread count"),
        (
            '{"cpu": {"threads": 1}, "executors": [{"kind": "llama", "path": ""}]}',
            "host.json: $.executors[0].path: is empty",
        ),
        (
            '{"cpu": {"threads": 1}, "executors": [{"kind": "llama", "path": "/a"},'
            ' {"kind": "llama", "path": "/b"}]}',
            "host.json: $.executors[1].kind: llama is listed twice",
        ),
        ("cpu: 8", "host.json: not JSON"),
        (
            '{"cpu": {"threads": 1, "available": -5}}',
            "host.json: $.cpu.available: -5 is not a size in bytes",
        ),
        (
            '{"cpu": {"threads": 1}, "gpus": [{"card": "card0", "driver": "amdgpu",'
            ' "vram_free": -1}]}',
            "host.json: $.gpus[0].vram_free: -1 is not a size in bytes",
        ),
        (
            '{"cpu": {"threads": 1}, "measurements": [{"model": "/m.gguf", "ctx": 512,'
            ' "host": {"name": "Host", "model": 1, "context": -2, "compute": 3}}]}',
            "host.json: $.measurements[0].host.context: -2 is not a size in bytes",
        ),
        (
            '{"cpu": {"threads": 1}, "measurements": [{"model": "", "ctx": 512,'
            ' "host": {"name": "Host", "model": 1, "context": 2, "compute": 3}}]}',
            "host.json: $.measurements[0].model: is empty",
        ),
    ],
)
def test_a_bad_file_names_the_file_and_the_field(text: str, said: str) -> None:
    with pytest.raises(HardwareFileError) as e:
        hardware_from_json(text, "host.json")
    assert str(e.value).startswith(said), str(e.value)


def test_the_command_line_names_the_file(tmp_path: Path) -> None:
    f = tmp_path / "host.json"
    f.write_text('{"cpu": {"threads": 8, "ram": "lots"}}')
    code, _, err = cli(*_plan_args(f))
    assert code == 2
    assert err == f"exedra-engine: error: {f}: $.cpu.ram: Expected `int`, got `str`\n"
    code, _, err = cli(*_plan_args(tmp_path / "missing.json"))
    assert code == 2 and "missing.json: cannot read: No such file" in err
    code, _, err = cli(*_plan_args(tmp_path))
    assert code == 2 and "cannot read" in err


def test_load_hardware_refuses_what_is_not_a_probe(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(" " * (2 << 20))
    assert "larger than" in str(load_hardware(big).failure())
    ok = tmp_path / "ok.json"
    ok.write_text('{"cpu": {"threads": 4}}')
    assert load_hardware(ok).unwrap().cpu.threads == 4


def test_a_file_from_an_older_probe_still_loads() -> None:
    # written before free memory and measurements were probed: they read as unknown / none
    old = (
        '{"cpu": {"threads": 4, "ram": 8589934592},'
        ' "gpus": [{"card": "card0", "driver": "amdgpu", "vram": 1024}]}'
    )
    hw = hardware_from_json(old, "old.json")
    assert hw.cpu.available is None
    assert hw.gpus[0].vram_free is None
    assert hw.measurements == ()


@pytest.mark.parametrize("threads", [8193, 10**7, 2**62])
def test_a_thread_count_no_host_has_is_refused_before_anything_is_built(threads: int) -> None:
    start = time.perf_counter()
    with pytest.raises(HardwareFileError) as e:
        hardware_from_json(f'{{"cpu": {{"threads": {threads}}}}}', "host.json")
    assert time.perf_counter() - start < 0.1
    assert str(e.value) == (
        f"host.json: $.cpu.threads: {threads} is not a thread count (1 to 8192, a host's)"
    )


def test_a_group_plan_from_a_file_with_absurd_threads_is_one_line(
    tmp_path: Path, tiny_llama: Path
) -> None:
    hw = tmp_path / "hw.json"
    hw.write_text('{"cpu": {"threads": 1000000000}}')
    group = tmp_path / "g.yaml"
    group.write_text(f"members:\n  - {{id: a, model: {tiny_llama}}}\n")
    r = cli("plan", "--group", str(group), "--hardware", str(hw), "--no-config")
    assert r.code != 0 and "Traceback" not in r.err
    assert "$.cpu.threads: 1000000000 is not a thread count" in r.err


@pytest.mark.parametrize(
    ("device", "said"),
    [
        ({"name": "Vulkan0", "description": "x", "total": 1, "free": 2}, "devices[0].free"),
        ({"name": "-rf", "description": "x", "total": 1, "free": 1}, "devices[0].name"),
        ({"name": "V0", "description": "\x1b[2J", "total": 1, "free": 1}, "devices[0].description"),
        ({"name": "V0", "description": "x", "total": -1, "free": 0}, "devices[0].total"),
        ({"name": "V0", "description": "x", "total": 2**62, "free": 0}, "devices[0].total"),
    ],
)
def test_recorded_devices_of_hostile_shape_are_refused_naming_the_field(
    device: dict[str, object], said: str
) -> None:
    doc = {
        "cpu": {"threads": 1},
        "executors": [{"kind": "llama", "path": "/x", "devices": [device]}],
    }
    with pytest.raises(HardwareFileError) as e:
        hardware_from_json(json.dumps(doc), "host.json")
    assert f"$.executors[0].{said}" in str(e.value)
    assert "\x1b" not in str(e.value)


def test_a_device_recorded_twice_or_too_many_is_refused() -> None:
    dev = {"name": "Vulkan0", "description": "x", "total": 1, "free": 1}
    doc = {
        "cpu": {"threads": 1},
        "executors": [{"kind": "llama", "path": "/x", "devices": [dev, dev]}],
    }
    with pytest.raises(HardwareFileError, match=r"devices\[1\].name: Vulkan0 is listed twice"):
        hardware_from_json(json.dumps(doc), "host.json")
    many = [{**dev, "name": f"Vulkan{i}"} for i in range(65)]
    doc["executors"][0]["devices"] = many  # type: ignore[index]
    with pytest.raises(HardwareFileError, match="65 devices: more than 64"):
        hardware_from_json(json.dumps(doc), "host.json")


def test_an_older_file_without_devices_loads_and_plans_by_the_kernels_gpus() -> None:
    hw = hardware_from_json(
        '{"cpu": {"threads": 1}, "executors": [{"kind": "llama", "path": "/x"}]}', "host.json"
    )
    assert hw.executors[0].devices == () and not hw.executors[0].listed()


@pytest.mark.parametrize(
    "pairs",
    [[["lower", "0"]], [["GGML_VK_VISIBLE_DEVICES", "\x1b[2J"]], [["A", "1"]] * 17],
)
def test_recorded_device_variables_of_hostile_shape_are_refused(pairs: list[list[str]]) -> None:
    doc = {
        "cpu": {"threads": 1},
        "executors": [{"kind": "llama", "path": "/x", "devices_env": pairs}],
    }
    with pytest.raises(HardwareFileError) as e:
        hardware_from_json(json.dumps(doc), "host.json")
    assert "$.executors[0].devices_env" in str(e.value) and "\x1b" not in str(e.value)


# -- launch refuses another host's file -----------------------------------------------


@pytest.fixture
def other_hosts_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "other.json"
    path.write_bytes(msgspec.json.encode(eight_threads("/opt/other-host/bin/llama-server")))
    yield path


@pytest.mark.serial  # a launch: refused before any process, which the test counts
def test_launch_with_another_hosts_hardware_file_is_refused_before_any_process(
    other_hosts_file: Path, tiny_llama: Path, run: Run
) -> None:
    hw_file = other_hosts_file
    r = run("launch", "--model", str(tiny_llama), "--kind", "llama", "--hardware", str(hw_file))
    assert r.code == 2, r
    assert f"--hardware {hw_file}" in r.err and "/opt/other-host/bin/llama-server" in r.err
    assert "does not exist" in r.err and r.err.count("\n") == 1
    assert psutil.Process().children(recursive=True) == []
    # Planning for that host stays what the file is for.
    planned = run(
        "plan",
        "--model",
        str(tiny_llama),
        "--kind",
        "llama",
        "--hardware",
        str(hw_file),
        "--no-port-check",
        "--json",
    )
    assert planned.code == 0, planned
    assert json.loads(planned.out)["command"] == "/opt/other-host/bin/llama-server"
