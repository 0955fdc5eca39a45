"""The command line of a group: ``launch --group FILE`` (every member at once, one ready line
each, Ctrl-C stops them all, a failing member named in one line), ``launch --group FILE
--router`` (the real llama.cpp router, both models answering on demand) and ``plan --group
FILE --emit`` (the files, validated as `plan --emit`'s are)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

# The launcher helpers, and the autouse fixture that stops a launcher a failed test left.
from tests.cli.test_signals_in_every_phase import _alive, _env, _no_launcher_left, _start  # noqa: F401
from tests.conftest import Run
from tests.http_client import http
from tests.project.test_docs import _docs_model_dir, _reachable_copy


def _group_file(tmp_path: Path, *members: str) -> Path:
    f = tmp_path / "group.yaml"
    f.write_text("members:\n" + "".join(f"  - {m}\n" for m in members))
    return f


@pytest.mark.executor
def test_launch_group_prints_a_line_per_member_and_ctrl_c_stops_all(
    tmp_path: Path, tiny_llama: Path, llama_server: str
) -> None:
    group = _group_file(
        tmp_path,
        f"{{id: a, model: {tiny_llama}, ctx: 256}}",
        f"{{id: b, model: {tiny_llama}, ctx: 256}}",
    )
    p = _start(["launch", "--group", str(group), "--no-config", "--quiet"], _env(llama_server))
    assert p.stdout is not None
    lines = [p.stdout.readline() for _ in range(3)]
    assert [ln.split()[:2] for ln in lines[:2]] == [["ready", "a"], ["ready", "b"]], lines
    assert lines[2].startswith("all 2 ready")
    urls = [ln.split()[2] for ln in lines[:2]]
    assert all(http(u + "/health")[0] == 200 for u in urls)
    kids = [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "stopped   a  exit 0 after a stop request" in err
    assert "stopped   b  exit 0 after a stop request" in err
    assert len(kids) == 2 and not any(_alive(k) for k in kids)


@pytest.mark.executor
def test_launch_group_names_the_member_that_fails_in_one_line_and_leaves_nothing(
    tmp_path: Path, tiny_llama: Path, llama_server: str, run: Run
) -> None:
    # A block count the file does not have: llama-server refuses to load it.
    group = _group_file(
        tmp_path,
        f"{{id: good, model: {tiny_llama}, ctx: 256}}",
        f"{{id: broken, model: {tiny_llama}, ctx: 256, "
        "args: [--override-kv, 'llama.block_count=int:99']}",
    )
    r = run(
        "launch", "--group", str(group), "--no-config", "--quiet",
        env={"PATH": _env(llama_server)["PATH"]},
    )  # fmt: skip
    assert r.code == 1
    (line,) = r.err.strip().splitlines()
    assert line.startswith("exedra-engine: error: group member 'broken' failed: llama-server")
    assert psutil.Process().children(recursive=True) == []
    r = run(
        "launch", "--group", str(group), "--no-config", "--quiet", "--json",
        env={"PATH": _env(llama_server)["PATH"]},
    )  # fmt: skip
    error = json.loads(r.out)["error"]
    assert r.code == 1 and error["member"] == "broken" and error["kind"] == "model-not-loaded"


def test_router_and_llama_swap_need_a_group(run: Run, tiny_llama: Path) -> None:
    r = run("plan", "--model", str(tiny_llama), "--kind", "llama", "--emit", "router")
    assert r.code == 2 and "--emit router serves several models: give --group FILE" in r.err
    r = run("launch", "--model", str(tiny_llama), "--kind", "llama", "--router")
    assert r.code == 2 and "--router runs a group's llama members" in r.err
    r = run("launch", "--group", "g.yaml", "--drain", "5")
    assert r.code == 2 and "--drain does not go with --group" in r.err


@pytest.mark.executor
@pytest.mark.slow
def test_launch_group_router_serves_both_models_on_demand(
    tmp_path: Path, real_model: Path, tiny_llama: Path, llama_server: str
) -> None:
    group = _group_file(
        tmp_path,
        f"{{id: chat, model: {real_model}, ctx: 512}}",
        f"{{id: tiny, model: {tiny_llama}, ctx: 256}}",
    )
    argv = ["launch", "--group", str(group), "--router", "--no-config", "--quiet"]
    p = _start(argv, _env(llama_server))
    assert p.stdout is not None
    said = p.stdout.readline()
    assert said.startswith("router    serves chat, tiny: each loads on its first request"), said
    ready = p.stdout.readline()
    assert ready.startswith("ready     router at http://127.0.0.1:"), ready
    url = ready.split(" at ", 1)[1].split()[0]
    tries = [p.stdout.readline() for _ in range(2)]  # one a model, each naming it
    assert ['"model": "chat"' in tries[0], '"model": "tiny"' in tries[1]] == [True, True], tries
    code, listed = http(url + "/models")
    assert code == 200 and {m["id"] for m in listed["data"]} == {"chat", "tiny"}
    for name in ("chat", "tiny"):
        code, out = http(url + "/v1/completions", {"model": name, "prompt": "Hi", "max_tokens": 3})
        assert code == 200 and out["model"] == name, out
    kids = [c.pid for c in psutil.Process(p.pid).children(recursive=True)]
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert len(kids) >= 2 and not any(_alive(k) for k in kids)  # the router and its children


@pytest.mark.executor
def test_plan_group_emits_systemd_units_that_verify(
    tmp_path: Path, tiny_llama: Path, llama_server: str, run: Run
) -> None:
    # Not under /tmp: a DynamicUser= unit has a private /tmp, and the emitter refuses it.
    model = _docs_model_dir() / "tiny.gguf"
    model.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_llama, model)
    group = _group_file(
        tmp_path, f"{{id: a, model: {model}, ctx: 256}}", f"{{id: b, model: {model}, ctx: 256}}"
    )
    out = tmp_path / "units"
    out.mkdir()
    # The units' DynamicUser= must reach the executor (a copy of the build beside the model,
    # not the 0700 home cache); the waiter is one not on this host (not judged), swapped for
    # this Python before systemd-analyze, which needs it to exist.
    exe = _reachable_copy(llama_server)
    waiter = "/usr/bin/exedra-engine-absent"
    r = run(
        "plan", "--group", str(group), "--no-config", "--no-port-check", "--emit", "systemd",
        "--out", str(out), "--name", "pair", "--waiter", waiter,
        env={"PATH": _env(exe)["PATH"]},
    )  # fmt: skip
    assert r.code == 0, r.err
    assert sorted(os.listdir(out)) == ["pair-a.service", "pair-b.service", "pair.target"]
    for f in sorted(out.iterdir()):
        f.write_text(f.read_text().replace(waiter, sys.executable))
        v = subprocess.run(
            ["systemd-analyze", "verify", str(f)], capture_output=True, text=True, check=False
        )
        assert (v.returncode, v.stderr) == (0, ""), (f.name, v.stderr)


@pytest.mark.executor
def test_a_keyed_router_is_ready_and_answers_only_to_its_key(
    tmp_path: Path, tiny_llama: Path, llama_server: str
) -> None:
    group = _group_file(
        tmp_path,
        f"{{id: a, model: {tiny_llama}, ctx: 256}}",
        f"{{id: b, model: {tiny_llama}, ctx: 256}}",
    )
    argv = ["launch", "--group", str(group), "--router", "--api-key-env", "GROUP_KEY"]
    env = {**_env(llama_server), "GROUP_KEY": "k-router-cli"}
    p = _start([*argv, "--no-config", "--quiet"], env)
    assert p.stdout is not None
    p.stdout.readline()  # the router line
    ready = p.stdout.readline()
    assert ready.startswith("ready     router at http://127.0.0.1:"), ready
    url = ready.split(" at ", 1)[1].split()[0]
    tries = [p.stdout.readline() for _ in range(2)]  # one a model, each naming it, keyed
    assert ['"model": "a"' in tries[0], '"model": "b"' in tries[1]] == [True, True], tries
    assert all("Bearer $GROUP_KEY" in t for t in tries), tries
    body = {"model": "b", "prompt": "Hi", "max_tokens": 2}
    assert http(url + "/v1/completions", body)[0] == 401
    code, out = http(url + "/v1/completions", body, "k-router-cli")
    assert code == 200 and out["model"] == "b", out
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "k-router-cli" not in err


@pytest.mark.executor
def test_plan_group_emits_kubernetes_that_binds_every_address_and_validates(
    tmp_path: Path, tiny_llama: Path, llama_server: str, run: Run
) -> None:
    from tests.emit.test_emit_deploy import kubernetes_validate

    group = _group_file(
        tmp_path,
        f"{{id: a, model: {tiny_llama}, ctx: 256}}",
        f"{{id: b, model: {tiny_llama}, ctx: 256}}",
    )
    out = tmp_path / "k8s"
    out.mkdir()
    r = run(
        "plan", "--group", str(group), "--no-config", "--no-port-check", "--emit", "k8s",
        "--out", str(out), "--name", "pair", env={"PATH": _env(llama_server)["PATH"]},
    )  # fmt: skip
    assert r.code == 0, r.err
    files = sorted(out.iterdir())
    assert [f.name for f in files] == ["pair-a.yaml", "pair-b.yaml"]
    assert all("0.0.0.0" in f.read_text() for f in files)
    assert kubernetes_validate(files) == ""


def test_launch_group_log_file_is_made_0600_and_a_failing_member_is_named(
    tmp_path: Path, tiny_llama: Path, run: Run
) -> None:
    # The members' logs may hold what a key leaves in them: made 0600 as launch's log is.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "llama-server"
    fake.write_text("#!/bin/sh\necho 'fake: exiting' >&2\nexit 3\n")
    fake.chmod(0o755)
    group = _group_file(tmp_path, f"{{id: a, model: {tiny_llama}, ctx: 256}}")
    log = tmp_path / "group.log"
    old = os.umask(0o022)
    try:
        r = run(
            "launch", "--group", str(group), "--no-config", "--no-port-check",
            "--log-file", str(log), env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
        )  # fmt: skip
    finally:
        os.umask(old)
    assert r.code == 1 and "member 'a' failed" in r.err, r.err
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert "fake: exiting" in log.read_text()
