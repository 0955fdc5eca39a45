"""Emitted units that deploy as planned (issue 22): one named regression test per item, and
the real validators over every fixture host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from exedra_engine import GPU, Constraints, ExecutorInfo, Hardware, Kind, ModelSpec, plan_launch
from exedra_engine._core.emit import EmitOptions, Selinux, Storage, Target, emit, emit_files
from exedra_engine._core.emit.checks import check_files
from exedra_engine._core.emit.formats import ini
from exedra_engine._core.emit.names import DNS1035
from exedra_engine._core.launch.budget import load_budget
from exedra_engine._core.memory.plan import MemoryParts, MemoryPlan, PlaceMemory
from exedra_engine._core.plan.explained import Explained
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.values import ModelInfo
from exedra_engine._shell.local.host import LocalHost
from exedra_engine._shell.plan import file_size, sized
from exedra_engine.cli import main
from exedra_engine.errors import EmitError, EmitRefused
from tests.conftest import HOSTS, outside_tmp
from tests.emit_cases import MODEL, hardware

ALL_HOSTS = tuple(sorted(p.name for p in HOSTS.iterdir() if p.is_dir()))


def _plan(tree: str = "none", *, path: str = MODEL, id_: str = "qwen", **c: Any) -> LaunchPlan:
    spec = ModelSpec(id=id_, path=path, kind=Kind.LLAMA)
    model = ModelInfo(path=path, size=4_683_073_184, architecture="qwen2")
    constraints = Constraints(host="0.0.0.0", port=8080, **c)
    return plan_launch(spec, hardware(tree), constraints, model=model).unwrap()


MIB = 1024 * 1024


def with_memory(plan: LaunchPlan, total: int) -> LaunchPlan:
    """`plan` with a hand-built memory plan whose expected resident peak is `total` bytes."""
    parts = MemoryParts(weights=total // 2, kv=total // 4, compute=total - total // 2 - total // 4)
    host = PlaceMemory(name="Host", total=total, parts=parts, reserved=total, reserved_parts=parts)
    return msgspec.structs.replace(plan, memory=MemoryPlan(source="estimated", ctx=4096, host=host))


def _files(plan: LaunchPlan, target: Target, tree: str = "none", **opts: Any) -> str:
    (text,) = emit_files(plan, target, EmitOptions(**opts), hardware(tree)).files.values()
    return text


def _refused(plan: LaunchPlan, target: Target, tree: str = "none", **opts: Any) -> str:
    r = emit(plan, target, EmitOptions(**opts), hardware=hardware(tree))
    err = r.failure()
    assert isinstance(err, EmitError), err
    return str(err)


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _pod(text: str) -> dict[str, Any]:
    pod: dict[str, Any] = _docs(text)[0]["spec"]["template"]["spec"]
    return pod


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _hw_file(tmp_path: Path, tree: str = "none") -> str:
    path = tmp_path / f"{tree}.json"
    path.write_bytes(msgspec.json.encode(hardware(tree)))
    return str(path)


# A waiter installed where a unit can run it (not this checkout's venv, which may be under /tmp
# and so hidden by PrivateTmp=): a path that does not exist here is not judged.
ELSEWHERE = ("--waiter", "/usr/local/lib/exedra-engine/bin/exedra-engine")


def _plan_cli(tmp_path: Path, *extra: str, tree: str = "none") -> list[str]:
    return [
        "plan", "--model", MODEL, "--kind", "llama", "--id", "qwen", "--hardware",
        _hw_file(tmp_path, tree), "--port", "8080", "--no-port-check", "--no-config", *extra,
    ]  # fmt: skip


# -- 1. the host root is never mounted ---------------------------------------------------------

TWO_TREES = ("--mmproj", "/usr/share/mm/mmproj-x.gguf")


def test_files_in_two_trees_mount_each_directory_never_the_root() -> None:
    plan = _plan(path="/srv/x/models/gemma/model.gguf", extra_args=TWO_TREES)
    pod = _pod(_files(plan, Target.K8S, storage=Storage.HOST))
    paths = [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v]
    assert paths == ["/srv/x/models/gemma", "/usr/share/mm"]
    args = pod["containers"][0]["args"]
    assert "/models/0/model.gguf" in args and "/models/1/mmproj-x.gguf" in args
    quadlet = ini.read_ini(_files(plan, Target.QUADLET))
    volumes = ini.setting(quadlet, "Container", "Volume")
    assert volumes == ["/srv/x/models/gemma:/models/0:ro", "/usr/share/mm:/models/1:ro"]
    # the claim is mounted once; its layout is said in the file
    text = _files(plan, Target.K8S)
    assert '# The model volume holds "0": "/srv/x/models/gemma"' in text
    assert check_files(plan, Target.K8S, {"m.yaml": text}) == []


def test_a_file_in_a_system_tree_is_mounted_alone() -> None:
    plan = _plan(path="/tmp/m.gguf")
    quadlet = ini.read_ini(_files(plan, Target.QUADLET))
    assert ini.setting(quadlet, "Container", "Volume") == ["/tmp/m.gguf:/models/0/m.gguf:ro"]
    pod = _pod(_files(plan, Target.K8S, storage=Storage.HOST))
    assert pod["volumes"][0]["hostPath"] == {"path": "/tmp/m.gguf", "type": "File"}


def test_a_models_dir_option_that_is_a_system_tree_is_refused() -> None:
    said = _refused(_plan(path="/srv/m/x.gguf"), Target.QUADLET, models_dir="/srv")
    assert "whole system tree" in said


def test_check_finds_an_edited_root_mount() -> None:
    plan = _plan()
    text = _files(plan, Target.K8S, storage=Storage.HOST)
    edited = text.replace("path: /var/lib/exedra/models/qwen", "path: /")
    assert any("whole system tree" in p for p in check_files(plan, Target.K8S, {"m": edited}))
    unit = _files(plan, Target.QUADLET).replace("/var/lib/exedra/models/qwen:", "/:")
    assert any("whole system tree" in p for p in check_files(plan, Target.QUADLET, {"u": unit}))


# -- 2. every file the executor loads is mounted and counted --------------------------------------


def test_a_split_set_is_counted_whole(tmp_path: Path) -> None:
    first = tmp_path / "big-00001-of-00003.gguf"
    first.write_bytes(b"\0" * 62528)
    for i in (2, 3):
        with open(tmp_path / f"big-0000{i}-of-00003.gguf", "wb") as f:
            f.truncate(20 * 1024**3)  # sparse: 20 GiB that take no disk
    spec = ModelSpec(id="big", path=str(first), kind=Kind.LLAMA)
    model = ModelInfo(path=str(first), size=62528, architecture="llama")
    c = Constraints(host="0.0.0.0", port=8080)
    plan = plan_launch(spec, hardware("none"), c, model=model).unwrap()
    assert [f.role for f in plan.files] == ["model", "shard", "shard"]
    host = LocalHost()
    e = Explained(plan=plan, sources=())
    plan = sized(e, lambda p: file_size(p, host)).plan
    total = 62528 + 2 * 20 * 1024**3
    assert sum(f.size for f in plan.files) == total
    e = emit_files(plan, Target.K8S, EmitOptions(), hardware("none"))
    budget = next(o for o in e.origins if o.field == "start budget")
    assert budget.value == f"{load_budget(total)}s" and load_budget(total) > 800
    probe = _pod(next(iter(e.files.values())))["containers"][0]["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= load_budget(total)


def test_projector_and_draft_are_counted() -> None:
    plan = _plan(extra_args=("--mmproj", "/var/lib/exedra/models/qwen/mm.gguf"))
    plan = msgspec.structs.replace(
        plan,
        files=tuple(msgspec.structs.replace(f, size=f.size or 10 * 1024**3) for f in plan.files),
    )
    e = emit_files(plan, Target.SYSTEMD, EmitOptions(), hardware("none"))
    total = 4_683_073_184 + 10 * 1024**3
    assert any(o.value == f"{load_budget(total)}s" for o in e.origins if o.field == "start budget")


def test_an_unknown_size_is_never_a_short_budget() -> None:
    plan = _plan(extra_args=("--model-draft", "/var/lib/exedra/models/d/d.gguf"))
    e = emit_files(plan, Target.K8S, EmitOptions(), hardware("none"))
    budget = next(o for o in e.origins if o.field == "start budget")
    assert int(budget.value[:-1]) >= 900 + load_budget(4_683_073_184) - 60
    assert "d.gguf" in budget.why


# -- 3. names every target accepts ----------------------------------------------------------------


@pytest.mark.parametrize("id_", ["7b-chat", "3", "Qwen 2.5/7B", "___", "模型"])
def test_every_id_gives_a_service_name_kubernetes_accepts(id_: str) -> None:
    text = _files(_plan(id_=id_), Target.K8S)
    for d in _docs(text):
        name = d["metadata"]["name"]
        assert DNS1035.fullmatch(name) and len(name) <= 63, name


def test_a_name_option_kubernetes_refuses_is_refused_at_parse(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, *_plan_cli(tmp_path, "--emit", "k8s", "--name", "7b-chat"))
    assert code == 2 and out == ""
    assert "argument --name" in err and "starting with a letter" in err
    assert "7b-chat" not in err  # the value given is never echoed


# -- 4. emit never writes what its own check rejects ----------------------------------------------


def test_emit_refuses_a_plan_its_check_rejects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The plan's port is its argv's (a view), so the argv is what a tampered plan gets wrong.
    plan = _plan()
    tampered = msgspec.structs.replace(
        plan, args=tuple("70000" if a == "8080" else a for a in plan.args)
    )
    for target in Target:
        r = emit(tampered, target, hardware=hardware("none"))
        assert isinstance(r.failure(), EmitRefused)
        assert any("do not resolve: port 70000 is outside" in p for p in r.failure().problems)
    saved = tmp_path / "plan.json"
    saved.write_bytes(msgspec.json.encode(tampered))
    out = tmp_path / "out"
    code, said, err = _cli(
        capsys, "emit", str(saved), "--target", "k8s", "--out", str(out),
        "--hardware", _hw_file(tmp_path),
    )  # fmt: skip
    assert code == 2 and said == ""
    assert not out.exists()  # no file is written
    lines = err.splitlines()
    assert lines and all(line.startswith("exedra-engine: error: ") for line in lines)


@pytest.mark.parametrize("port", [0, 70000])
def test_a_plan_port_outside_tcp_is_refused(port: int) -> None:
    plan = _plan()
    plan = msgspec.structs.replace(
        plan, args=tuple(str(port) if a == "8080" else a for a in plan.args)
    )
    for target in Target:
        assert f"port {port} is outside 1-65535" in _refused(plan, target)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--uid", "0"),
        ("--uid", "-1"),
        ("--gpu-count", "-2"),
        ("--claim", "Upper_/x"),
        ("--namespace", "Bad_NS"),
        ("--publish-address", "a b"),
        ("--secret", "Upper"),
        ("--gpu-resource", "nvidia.com/gpu=all"),
        ("--image", "not an image"),
        ("--start-budget", "-5"),
        ("--gpu-group", "0"),
    ],
)
def test_bad_options_are_refused_where_parsed(
    option: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(capsys, *_plan_cli(tmp_path, "--emit", "k8s", f"{option}={value}"))
    assert (code, out) == (2, "")
    assert f"argument {option}" in err, err


@pytest.mark.parametrize(
    "opts",
    [{"uid": 0}, {"uid": -1}, {"gpu_count": -2}, {"claim": "Upper_/x"}, {"namespace": "Bad_NS"}],
)
def test_bad_options_are_refused_by_the_library_too(opts: dict[str, Any]) -> None:
    _refused(_plan(), Target.K8S, **opts)


def test_check_finds_what_the_kubelet_refuses() -> None:
    plan = _plan()
    text = _files(plan, Target.K8S)
    for edit, said in [
        (("runAsUser: 65532", "runAsUser: 0"), "runs as uid 0 with runAsNonRoot"),
        (("name: qwen\n", "name: 7b-chat\n"), "is not a valid Service name"),
        (("containerPort: 8080", "containerPort: 70000"), "is not a TCP port"),
    ]:
        problems = check_files(plan, Target.K8S, {"m": text.replace(*edit)})
        assert any(said in p for p in problems), (said, problems)


# -- 5. probes only on the profile's ready path ---------------------------------------------------


@pytest.mark.parametrize("ready", ["/v1/models", "health", "http://evil.example/x", "/health\n"])
def test_a_tampered_ready_path_is_refused(ready: str) -> None:
    plan = msgspec.structs.replace(_plan(), ready=ready)
    for target in Target:
        assert "ready path" in _refused(plan, target)
    assert any("ready path" in p for p in check_files(plan, Target.K8S, {}))


def test_a_prefix_set_in_the_argv_moves_the_probe() -> None:
    plan = _plan(extra_args=("--api-prefix", "/llm"))
    assert plan.ready == "/llm/health"
    pod = _pod(_files(plan, Target.K8S))
    assert pod["containers"][0]["startupProbe"]["httpGet"]["path"] == "/llm/health"


# -- 6. systemd and /tmp --------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/tmp/models/m.gguf", "/var/tmp/m.gguf"])
def test_systemd_refuses_models_its_private_tmp_hides(path: str) -> None:
    said = _refused(_plan(path=path), Target.SYSTEMD)
    assert "private /tmp" in said and path in said


# -- 7. Quadlet escapes $ in every field ----------------------------------------------------------


def test_quadlet_escapes_dollar_in_every_field() -> None:
    path = "/srv/x/dollar$HOME${X}/m.gguf"
    plan = _plan(path=path, extra_env=("EXEDRA_T=a$HOME",))
    text = _files(plan, Target.QUADLET)
    sections = ini.read_ini(text)
    for _key, value in sections["Container"]:
        ini.expand_dollars(value)  # raises on a lone $ that systemd would expand
    (volume,) = ini.setting(sections, "Container", "Volume")
    assert ini.expand_dollars(volume) == "/srv/x/dollar$HOME${X}:/models:ro"
    assert check_files(plan, Target.QUADLET, {"u": text}) == []
    lone = text.replace("dollar$$HOME", "dollar$HOME")
    assert any("$" in p for p in check_files(plan, Target.QUADLET, {"u": lone}))


@pytest.mark.parametrize("path", ["/srv/my models/m.gguf", "/srv/q'uo\"te/m.gguf"])
def test_quadlet_refuses_what_its_generator_writes_unquoted(path: str) -> None:
    assert "RequiresMountsFor=" in _refused(_plan(path=path), Target.QUADLET)


# -- 8. the system-call filter and limits match the flags -----------------------------------------


@pytest.mark.parametrize(
    ("args", "want"),
    [
        (("--prio", "2"), {"SystemCallFilter": "~@privileged", "LimitNICE": "-20",
                           "RestrictRealtime": "no", "LimitRTPRIO": "99"}),
        (("--cpu-mask", "0xff"), {"SystemCallFilter": "~@privileged"}),
        (("--numa", "distribute"), {"SystemCallFilter": "~@privileged"}),
        (("--mlock",), {"LimitMEMLOCK": "infinity",
                        "SystemCallFilter": "~@privileged @resources"}),
        (("--prio", "0"), {"SystemCallFilter": "~@privileged @resources",
                           "RestrictRealtime": "yes"}),
    ],
)  # fmt: skip
def test_systemd_filter_and_limits_follow_the_flags(
    args: tuple[str, ...], want: dict[str, str]
) -> None:
    s = ini.read_ini(_files(_plan(extra_args=args), Target.SYSTEMD))
    for key, value in want.items():
        assert ini.setting(s, "Service", key)[-1] == value, key


@pytest.mark.parametrize(("args", "flag"), [(("--prio", "2"), "--prio"), (("--mlock",), "--mlock")])
def test_kubernetes_refuses_the_flag_it_cannot_honour(args: tuple[str, ...], flag: str) -> None:
    assert flag in _refused(_plan(extra_args=args), Target.K8S)


def test_quadlet_grants_what_the_flags_need() -> None:
    s = ini.read_ini(_files(_plan(extra_args=("--prio", "3", "--mlock")), Target.QUADLET))
    assert ini.setting(s, "Container", "AddCapability") == ["SYS_NICE"]
    assert ini.setting(s, "Container", "Ulimit") == ["memlock=-1:-1"]


# -- 9. names never collide -----------------------------------------------------------------------


def test_ids_that_normalise_or_cut_alike_get_different_names() -> None:
    long = "x" * 48
    ids = ["___", "模型", "Qwen", "qwen!", f"{long}-q4_k_m", f"{long}-q8_0", "qwen"]
    names = [_docs(_files(_plan(id_=i), Target.K8S))[0]["metadata"]["name"] for i in ids]
    assert len(set(names)) == len(ids), names
    assert names[-1] == "qwen"  # an id that is a name already stays as it is
    again = _docs(_files(_plan(id_="模型"), Target.K8S))[0]["metadata"]["name"]
    assert again == names[1]  # stable


# -- 10. --explain covers every emitted field -----------------------------------------------------

_K8S_PREFIXES = (
    ("Deployment.spec.template.spec.containers.", "container."),
    ("Deployment.spec.template.spec.", "pod."),
    ("Deployment.", "deployment."),
    ("Service.", "service."),
)


def _leaves(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{path}.{k}")
    elif isinstance(value, list) and any(isinstance(v, dict) for v in value):
        for v in value:
            yield from _leaves(v, path)
    else:
        yield path


def emitted_fields(target: Target, text: str) -> set[str]:
    """Every field of an emitted file, named as `Origin.field` names it."""
    if target is not Target.K8S:
        return {f"{sec}.{key}" for sec, pairs in ini.read_ini(text).items() for key, _ in pairs}
    out = set()
    for d in _docs(text):
        for leaf in _leaves({k: v for k, v in d.items() if k not in ("apiVersion", "kind")}, ""):
            path = d["kind"] + leaf
            for long, short in _K8S_PREFIXES:
                if path.startswith(long):
                    path = short + path[len(long) :]
                    break
            out.add(path)
    return out


OPTION_SETS: tuple[dict[str, Any], ...] = (
    {},
    {"storage": Storage.HOST, "namespace": "llm", "gpu_groups": (110,)},
    {"selinux": Selinux.DISABLE, "publish_address": ""},
)


@pytest.mark.parametrize("target", list(Target))
@pytest.mark.parametrize("tree", ALL_HOSTS)
def test_explain_covers_every_emitted_field(tree: str, target: Target) -> None:
    for opts in OPTION_SETS:
        for extra in ((), ("--mlock",) if target is not Target.K8S else ()):
            plan = _plan(tree, api_key="k", extra_args=extra, extra_env=("EXEDRA_X=1",))
            if opts:
                plan = with_memory(plan, 600 * MIB)
            e = emit_files(plan, target, EmitOptions(**opts), hardware(tree))
            fields = {o.field for o in e.origins}
            (text,) = e.files.values()
            missing = {
                f
                for f in emitted_fields(target, text)
                if not any(f == o or f.startswith(o + ".") for o in fields)
            }
            assert not missing, (opts, missing)


# -- what the review found that needs the hardware, handled by construction -----------------------


def test_gpu_group_access_per_vendor() -> None:
    plan = _plan("amdgpu")
    text = _files(plan, Target.K8S, "amdgpu")
    assert "give --gpu-group" in text  # said where the manifest is read
    pod = _pod(_files(plan, Target.K8S, "amdgpu", gpu_groups=(110,)))
    assert pod["securityContext"]["supplementalGroups"] == [110]
    s = ini.read_ini(_files(plan, Target.SYSTEMD, "amdgpu"))
    assert ini.setting(s, "Service", "SupplementaryGroups") == ["render video"]
    q = ini.read_ini(_files(plan, Target.QUADLET, "amdgpu"))
    assert ini.setting(q, "Container", "GroupAdd") == ["keep-groups"]


def _vulkan_nvidia() -> Hardware:
    hw = hardware("nvidia")
    exe = ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server", backends=("cpu", "vulkan"))
    return Hardware(cpu=hw.cpu, gpus=(GPU(card="card0", driver="nvidia"),), executors=(exe,))


def test_vulkan_on_nvidia_gets_the_graphics_capability() -> None:
    hw = _vulkan_nvidia()
    spec = ModelSpec(id="qwen", path=MODEL, kind=Kind.LLAMA)
    plan = plan_launch(spec, hw, Constraints(host="0.0.0.0", port=8080)).unwrap()
    (text,) = emit_files(plan, Target.K8S, EmitOptions(), hw).files.values()
    c = _pod(text)["containers"][0]
    assert c["image"].endswith(":server-vulkan")
    want = {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility,graphics"}
    assert want in c["env"]
    (unit,) = emit_files(plan, Target.QUADLET, EmitOptions(), hw).files.values()
    assert 'Environment="NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics"' in unit


@pytest.mark.parametrize(
    ("selinux", "volume", "disabled"),
    [
        (Selinux.NONE, ":ro", []),
        (Selinux.SHARED, ":ro,z", []),
        (Selinux.PRIVATE, ":ro,Z", []),
        (Selinux.DISABLE, ":ro", ["true"]),
    ],
)
def test_selinux_label_option_for_quadlet(
    selinux: Selinux, volume: str, disabled: list[str]
) -> None:
    s = ini.read_ini(_files(_plan(), Target.QUADLET, selinux=selinux))
    assert ini.setting(s, "Container", "Volume")[0].endswith(volume)
    assert ini.setting(s, "Container", "SecurityLabelDisable") == disabled


def test_image_digest_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ref = "ghcr.io/ggml-org/llama.cpp:server@sha256:" + "ab" * 32
    assert _pod(_files(_plan(), Target.K8S, image=ref))["containers"][0]["image"] == ref
    code, out, err = _cli(capsys, *_plan_cli(tmp_path, "--host", "0.0.0.0", "--emit", "k8s",
                                             "--image", ref))  # fmt: skip
    assert code == 0, err
    assert ref in out


def test_container_targets_bind_every_address_without_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for target in ("k8s", "quadlet"):
        code, out, err = _cli(capsys, *_plan_cli(tmp_path, "--emit", target, "--explain"))
        assert code == 0, err
        assert "0.0.0.0" in out
        assert "binds every address when the caller sets no --host" in err
    code, out, err = _cli(capsys, *_plan_cli(tmp_path, "--emit", "systemd", *ELSEWHERE))
    assert code == 0 and '"--host" "127.0.0.1"' in out
    code, _, err = _cli(capsys, *_plan_cli(tmp_path, "--host", "127.0.0.1", "--emit", "k8s"))
    assert code == 2 and "plan with --host 0.0.0.0" in err


def test_the_readiness_hook_runs_the_installed_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    # Installed outside /tmp, which the unit's PrivateTmp= would hide (see the next test).
    opt = outside_tmp(f"waiter-{os.getpid()}")
    real = opt / "exedra-engine"
    opt.mkdir(parents=True, exist_ok=True)
    try:
        real.write_text("#!/bin/sh\n")
        real.chmod(0o755)
        (bindir / "exedra-engine").symlink_to(real)
        monkeypatch.setenv("PATH", str(bindir))
        code, out, err = _cli(capsys, *_plan_cli(tmp_path, "--emit", "systemd"))
        assert code == 0, err
        assert f"ExecStartPost={real} " in out
    finally:
        shutil.rmtree(opt)


def test_a_waiter_the_unit_cannot_reach_is_refused_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "opt" / "exedra-engine"
    real.parent.mkdir()
    real.write_text("#!/bin/sh\n")
    real.chmod(0o755)
    code, out, err = _cli(capsys, *_plan_cli(tmp_path, "--emit", "systemd", "--waiter", str(real)))
    assert code == 2 and out == ""
    assert f"the readiness waiter (ExecStartPost=) {real}: it is under a /tmp" in err
    assert "--waiter PATH" in err and "/usr/local/lib/exedra-engine" in err


# -- issue 19 item 5: emitters use the plan's memory ---------------------------------------------


def test_limits_are_the_resident_peak_plus_a_stated_margin() -> None:
    plan = with_memory(_plan(extra_args=("--threads", "6")), 600 * MIB)
    res = _pod(_files(plan, Target.K8S))["containers"][0]["resources"]
    # margin max(20 %, 256 MiB) = 256 MiB: request the peak, limit the peak + margin
    assert res == {"requests": {"memory": "600Mi", "cpu": "6"}, "limits": {"memory": "856Mi"}}
    s = ini.read_ini(_files(plan, Target.SYSTEMD))
    assert ini.setting(s, "Service", "MemoryHigh") == ["728M"]
    assert ini.setting(s, "Service", "MemoryMax") == ["856M"]
    q = ini.read_ini(_files(plan, Target.QUADLET))
    assert ini.setting(q, "Container", "Memory") == ["856m"]
    big = with_memory(_plan(), 10 * 1024 * MIB)  # 20 % = 2 GiB > 256 MiB
    limits = _pod(_files(big, Target.K8S))["containers"][0]["resources"]["limits"]
    assert limits["memory"] == f"{12 * 1024}Mi"


def test_each_memory_field_is_explained() -> None:
    plan = with_memory(_plan(extra_args=("--threads", "6")), 600 * MIB)
    for target, fields in (
        (Target.K8S, ("container.resources.requests.memory", "container.resources.limits.memory",
                      "container.resources.requests.cpu")),
        (Target.SYSTEMD, ("Service.MemoryHigh", "Service.MemoryMax")),
        (Target.QUADLET, ("Container.Memory",)),
    ):  # fmt: skip
        origins = {
            o.field: o for o in emit_files(plan, target, EmitOptions(), hardware("none")).origins
        }
        for f in fields:
            assert f in origins, (target, f)
        why = " ".join(origins[f].why for f in fields)
        assert "margin" in why or "threads" in why


def test_no_memory_plan_no_memory_setting() -> None:
    plan = _plan()
    assert plan.memory is None
    assert "resources" not in _pod(_files(plan, Target.K8S))["containers"][0]
    assert "MemoryMax" not in _files(plan, Target.SYSTEMD)
    assert "Memory=" not in _files(plan, Target.QUADLET)


def test_check_finds_a_limit_below_the_peak() -> None:
    plan = with_memory(_plan(), 600 * MIB)
    text = _files(plan, Target.K8S).replace("memory: 856Mi", "memory: 100Mi")
    assert any(
        "below the plan's expected resident peak" in p
        for p in check_files(plan, Target.K8S, {"m": text})
    )
    unit = _files(plan, Target.SYSTEMD).replace("MemoryMax=856M", "MemoryMax=100M")
    assert any("MemoryMax=" in p for p in check_files(plan, Target.SYSTEMD, {"u": unit}))
    q = _files(plan, Target.QUADLET).replace("Memory=856m", "Memory=100m")
    assert any("Memory=" in p for p in check_files(plan, Target.QUADLET, {"u": q}))


def test_the_planners_memory_reaches_the_manifest(
    tiny_llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _cli(
        capsys, "plan", "--model", str(tiny_llama), "--kind", "llama", "--id", "tiny",
        "--hardware", _hw_file(tmp_path), "--host", "0.0.0.0", "--port", "8080",
        "--no-port-check", "--no-config", "--json",
    )  # fmt: skip
    assert code == 0, err
    plan = msgspec.json.decode(out, type=LaunchPlan)
    assert plan.memory is not None
    text = _files(plan, Target.K8S)
    limit = _pod(text)["containers"][0]["resources"]["limits"]["memory"]
    assert int(limit[:-2]) * MIB >= plan.memory.host.total
    assert kubernetes_validate([_write(tmp_path / "m.yaml", text)]) == ""


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# -- the real validators over every fixture host ---------------------------------------------------


def fake_binary(tmp_path: Path) -> str:
    """An executable where the unit's ExecStart names one (verify checks it exists)."""
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return str(exe)


def systemd_verify(text: str, tmp_path: Path, name: str) -> str:
    """Everything systemd-analyze verify says about a unit ("" for a clean one)."""
    unit = tmp_path / name
    unit.write_text(text)
    r = subprocess.run(
        ["systemd-analyze", "verify", str(unit)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SYSTEMD_LOG_COLOR": "0"},
    )
    return f"rc {r.returncode}: {r.stderr}{r.stdout}" if r.returncode or r.stderr else ""


def kubernetes_validate(paths: list[Path]) -> str:
    """kubernetes-validate --strict's complaints about the manifests ("" when they pass)."""
    exe = shutil.which("kubernetes-validate") or str(
        Path(sys.executable).parent / "kubernetes-validate"
    )
    r = subprocess.run(
        [exe, "--strict", "--quiet", "-k", "1.35.0", *map(str, paths)],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"rc {r.returncode}: {r.stdout}{r.stderr}" if r.returncode else ""


needs_systemd = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)


@pytest.mark.parametrize("tree", ALL_HOSTS)
def test_every_fixture_host_passes_kubernetes_validate_strict(tree: str, tmp_path: Path) -> None:
    paths = []
    for i, opts in enumerate(OPTION_SETS):
        plan = _plan(tree, api_key="k", extra_args=("--threads", "4"))
        text = _files(with_memory(plan, 5 * 1024 * MIB) if i else plan, Target.K8S, tree, **opts)
        paths.append(tmp_path / f"{i}.yaml")
        paths[-1].write_text(text)
    assert kubernetes_validate(paths) == ""


@needs_systemd
@pytest.mark.parametrize("tree", ALL_HOSTS)
def test_every_fixture_host_passes_systemd_analyze_verify(tree: str, tmp_path: Path) -> None:
    exe = fake_binary(tmp_path)
    for extra in ((), ("--prio", "3", "--mlock", "--cpu-mask", "0xf")):
        plan = msgspec.structs.replace(_plan(tree, api_key="k", extra_args=extra), command=exe)
        plan = with_memory(plan, 600 * MIB) if extra else plan
        text = _files(plan, Target.SYSTEMD, tree, waiter=sys.executable)
        assert systemd_verify(text, tmp_path, "qwen.service") == ""


def test_quadlet_generator_where_installed(tmp_path: Path) -> None:
    quadlet = next(
        (
            p
            for p in (
                "/usr/libexec/podman/quadlet",
                "/usr/lib/systemd/system-generators/podman-system-generator",
            )
            if os.access(p, os.X_OK)
        ),
        None,
    )
    if quadlet is None:
        pytest.skip(
            "quadlet is not installed: Debian 12's podman 4.3 predates it (4.4); the Quadlet "
            "units are checked structurally and by the golden files"
        )
    for tree in ALL_HOSTS:
        d = tmp_path / tree
        d.mkdir()
        (d / "qwen.container").write_text(_files(_plan(tree, api_key="k"), Target.QUADLET, tree))
        r = subprocess.run(
            [quadlet, "-dryrun"],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "QUADLET_UNIT_DIRS": str(d)},
        )
        assert r.returncode == 0 and "qwen.service" in r.stdout, r.stderr


def test_emitted_origins_are_json() -> None:
    # --explain renders them; a plan's JSON consumers read them too
    e = emit_files(_plan(), Target.K8S, EmitOptions(), hardware("none"))
    assert json.loads(msgspec.json.encode(e.origins))
