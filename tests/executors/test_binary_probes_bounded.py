"""Asking a binary (``--version``, ``--help``, ``--list-devices``) is bounded end to end: a
binary that hangs, floods, lies or leaves a helper holding its pipes (``setsid sleep 197 &``)
is given up on within its bound, named, and nothing it started is left; the device list is
asked under the plan's environment and cached by the binary and that environment."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._core.memory.settings import MIB
from exedra_engine._shell.local import device_list, flag_tables
from tests.conftest import Run

LIST = (
    "printf 'Available devices:\\n  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) "
    "(2048 MiB, 2048 MiB free)\\n'"
)
# The answer to --list-devices, by mode; GGML_VK_VISIBLE_DEVICES="" hides the device, as the
# Vulkan backend does.
MODES = {
    "ok": f'if [ "${{GGML_VK_VISIBLE_DEVICES-x}}" = "" ]; then '
    "printf 'Available devices:\\n  (none)\\n'; else "
    f"{LIST}; fi",
    "hang": "exec sleep 30",
    "flood": "exec yes '  Vulkan0: x (1 MiB, 1 MiB free)'",
    "lie": "printf 'Available devices:\\n  Vulkan0: x (1024 MiB, 4096 MiB free)\\n'",
    "refuse": "echo 'error: invalid argument: --list-devices' >&2; exit 1",
}


def _fake(tmp_path: Path, mode: str = "ok", *, escape: bool = False) -> tuple[Path, Path]:
    """A llama-server that logs each call (its argv and GGML_VK_VISIBLE_DEVICES) and answers
    --list-devices by `mode`; with `escape`, every call first starts a helper in a session of
    its own that holds the pipes (its pid in ``helpers``)."""
    calls = tmp_path / "calls"
    helpers = tmp_path / "helpers"
    b = tmp_path / "bin" / "llama-server"
    b.parent.mkdir(exist_ok=True)
    leave = f"setsid sleep 197 & echo $! >> {helpers}\n" if escape else ""
    b.write_text(
        "#!/bin/sh\n"
        f'echo "$1 vk=${{GGML_VK_VISIBLE_DEVICES-unset}}" >> {calls}\n' + leave + 'case "$1" in\n'
        "  --version) echo 'version: 7 (abc)' >&2 ;;\n"
        "  --help) echo '-c, --ctx-size N   size of the prompt context' ;;\n"
        f"  --list-devices) {MODES[mode]} ;;\n"
        "esac\n"
    )
    b.chmod(b.stat().st_mode | stat.S_IXUSR)
    return b, calls


def _calls(calls: Path, flag: str) -> list[str]:
    return [ln for ln in calls.read_text().splitlines() if ln.startswith(flag)]


def _gone(pid: int, within: float = 2.0) -> bool:
    """Whether `pid` no longer exists within `within` seconds: killed and reaped, not left a
    zombie (an escaped helper is init's child by then, and init reaps it)."""
    until = time.monotonic() + within
    while os.path.exists(f"/proc/{pid}"):
        if time.monotonic() > until:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_the_devices_are_read_and_cached_by_binary_and_environment(tmp_path: Path) -> None:
    b, calls = _fake(tmp_path)
    env = {"PATH": "/usr/bin:/bin"}
    for _ in range(2):
        (dev,) = device_list.executor_devices(LLAMA, str(b), env) or ()
        assert (dev.name, dev.total, dev.free) == ("Vulkan0", 2048 * MIB, 2048 * MIB)
    assert _calls(calls, "--list-devices") == ["--list-devices vk=unset"]  # cached
    # Another value of a variable the backends read is another list, asked under it.
    hidden = {**env, "GGML_VK_VISIBLE_DEVICES": ""}
    assert device_list.executor_devices(LLAMA, str(b), hidden) == ()
    assert _calls(calls, "--list-devices")[-1] == "--list-devices vk="
    # A variable no backend reads is not: the first entry holds.
    assert device_list.executor_devices(LLAMA, str(b), {**env, "OTHER": "1"})
    assert len(_calls(calls, "--list-devices")) == 2


def test_a_stale_entry_is_asked_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    b, calls = _fake(tmp_path)
    device_list.executor_devices(LLAMA, str(b), {})
    monkeypatch.setattr(device_list, "FRESH", 0.0)
    time.sleep(0.01)
    device_list.executor_devices(LLAMA, str(b), {})
    assert len(_calls(calls, "--list-devices")) == 2


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("hang", "--list-devices did not exit within 0.5 s"),
        ("flood", "--list-devices printed more than"),
        ("lie", "--list-devices: line 2: Vulkan0 has 4096 MiB free of 1024 MiB"),
        ("refuse", "no 'Available devices:' line: not llama.cpp's device list (it said: error"),
    ],
)
def test_a_binary_that_hangs_floods_or_lies_is_bounded_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, said: str
) -> None:
    monkeypatch.setattr(flag_tables, "TIMEOUT", 0.5)
    b, calls = _fake(tmp_path, mode)
    start = time.monotonic()
    assert device_list.executor_devices(LLAMA, str(b), {}) is None
    assert time.monotonic() - start < 3.0
    problem = device_list.devices_problem(LLAMA, str(b), {})
    assert problem.startswith(str(b)) and said in problem, problem
    # Asked once in this process, not again for every plan. A hang or a flood may not
    # happen again: not cached on disk. A lie or a refusal is what this binary answers:
    # cached while the binary is unchanged, so the next process does not ask it again.
    assert device_list.executor_devices(LLAMA, str(b), {}) is None
    assert len(_calls(calls, "--list-devices")) == 1
    answered = mode in ("lie", "refuse")
    assert bool(list((tmp_path / "cache").rglob("*.json"))) == answered
    device_list._problems.clear()  # a new process
    assert device_list.executor_devices(LLAMA, str(b), {}) is None
    assert device_list.devices_problem(LLAMA, str(b), {}) == problem
    assert len(_calls(calls, "--list-devices")) == (1 if answered else 2)


@pytest.mark.parametrize("mode", ["ok", "hang"])
def test_a_helper_that_escapes_with_the_pipes_is_killed_and_reaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setattr(flag_tables, "TIMEOUT", 1.0)
    b, _ = _fake(tmp_path, mode, escape=True)
    start = time.monotonic()
    got = device_list.executor_devices(LLAMA, str(b), {})
    assert time.monotonic() - start < 5.0
    assert (got is not None) == (mode == "ok")
    pids = [int(p) for p in (tmp_path / "helpers").read_text().split()]
    assert pids and all(_gone(p) for p in pids), pids


def test_the_version_and_help_probe_is_bounded_with_an_escaped_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The binary answers, but a helper it daemonised keeps its pipes open for 197 s: the
    # probe used to wait for their end-of-file with no bound, and planning hung.
    b, _ = _fake(tmp_path, escape=True)
    start = time.monotonic()
    assert flag_tables.executor_version(LLAMA, str(b)) == "7 (abc)"
    table, origin = flag_tables.executor_table(LLAMA, str(b))
    assert time.monotonic() - start < 6.0
    assert origin.source == "binary" and table.lookup("--ctx-size") is not None
    pids = [int(p) for p in (tmp_path / "helpers").read_text().split()]
    assert len(pids) == 2 and all(_gone(p) for p in pids), pids


def test_a_help_that_hangs_with_an_escaped_helper_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flag_tables, "TIMEOUT", 0.5)
    b = tmp_path / "llama-server"
    helpers = tmp_path / "helpers"
    b.write_text(f"#!/bin/sh\nsetsid sleep 197 & echo $! >> {helpers}\nexec sleep 30\n")
    b.chmod(0o755)
    start = time.monotonic()
    _, origin = flag_tables.executor_table(LLAMA, str(b))
    assert time.monotonic() - start < 4.0
    assert "did not exit within 0.5 s" in origin.note
    assert all(_gone(int(p)) for p in helpers.read_text().split())


def test_probe_shows_and_records_the_executors_devices(run: Run, tmp_path: Path) -> None:
    b, _ = _fake(tmp_path)
    env = {"PATH": f"{b.parent}{os.pathsep}/usr/bin:/bin"}
    r = run("probe", env=env)
    assert r.code == 0, r.err
    assert "device Vulkan0  llvmpipe (LLVM 15.0.6, 256 bits)  memory 2.0 GiB, 2.0 GiB free" in r.out
    j = run("probe", "--json", env=env)
    doc = json.loads(j.out)
    (llama,) = (e for e in doc["executors"] if e["kind"] == "llama")
    assert llama["devices"] == [
        {
            "name": "Vulkan0",
            "description": "llvmpipe (LLVM 15.0.6, 256 bits)",
            "total": 2048 * MIB,
            "free": 2048 * MIB,
        }
    ]
    assert llama["devices_listed"] is True
    assert "software renderer" in r.out
    if not doc["gpus"]:  # this host's kernel shows no GPU: the views disagree
        assert "Vulkan0 (llvmpipe (LLVM 15.0.6, 256 bits)) has no GPU in sysfs" in r.out


def test_probe_names_a_device_list_it_gave_up_on(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(flag_tables, "TIMEOUT", 0.5)
    b, _ = _fake(tmp_path, "hang")
    r = run("probe", env={"PATH": f"{b.parent}{os.pathsep}/usr/bin:/bin"})
    assert r.code == 0, r.err
    assert f"devices: not listed ({b} --list-devices did not exit within 0.5 s)" in r.out
    assert f"{b} --list-devices did not exit within 0.5 s; its devices are unknown" in r.err


def test_a_plan_lists_the_devices_under_its_own_environment(
    run: Run, tmp_path: Path, tiny_llama: Path
) -> None:
    b, calls = _fake(tmp_path)
    env = {"PATH": f"{b.parent}{os.pathsep}/usr/bin:/bin"}
    base = ("plan", "--model", str(tiny_llama), "--kind", "llama", "--no-config",
            "--no-port-check", "--json")  # fmt: skip
    seen = json.loads(run(*base, env=env).out)
    assert "--n-gpu-layers" not in seen["args"]  # Vulkan0 is used
    assert seen["memory"]["devices"][0]["name"] == "Vulkan0"
    hidden = json.loads(run(*base, "--env", "GGML_VK_VISIBLE_DEVICES=", env=env).out)
    args = hidden["args"]
    assert args[args.index("--n-gpu-layers") + 1] == "0"  # the plan's own env hides it
    assert "--list-devices vk=" in _calls(calls, "--list-devices")


def test_probe_records_the_variables_the_devices_were_listed_under(
    run: Run, tmp_path: Path
) -> None:
    b, calls = _fake(tmp_path)
    env = {"PATH": f"{b.parent}{os.pathsep}/usr/bin:/bin", "GGML_VK_VISIBLE_DEVICES": "0"}
    doc = json.loads(run("probe", "--json", env=env).out)
    (llama,) = (e for e in doc["executors"] if e["kind"] == "llama")
    assert llama["devices_env"] == [["GGML_VK_VISIBLE_DEVICES", "0"]]
    assert "devices as listed under GGML_VK_VISIBLE_DEVICES=0" in run("probe", env=env).out
    # A plan whose own environment chooses the same devices asks nothing more.
    asked = len(_calls(calls, "--list-devices"))
    base = ("plan", "--model", str(tmp_path / "absent.gguf"), "--kind", "llama",
            "--no-config", "--no-port-check", "--json")  # fmt: skip
    r = run(*base, "--env", "GGML_VK_VISIBLE_DEVICES=0", env=env)
    assert r.code == 0, r.err
    assert len(_calls(calls, "--list-devices")) == asked
