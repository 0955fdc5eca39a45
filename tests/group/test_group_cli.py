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
from tests.conftest import FAKE, Run
from tests.http_client import http
from tests.project.test_docs import _docs_model_dir, _reachable_copy


def _group_file(tmp_path: Path, *members: str) -> Path:
    f = tmp_path / "group.yaml"
    f.write_text("members:\n" + "".join(f"  - {m}\n" for m in members))
    return f


def _tiny_pair(tmp_path: Path, model: Path) -> Path:
    """A group file of two members, a and b, both serving `model` at ctx 256."""
    return _group_file(
        tmp_path, f"{{id: a, model: {model}, ctx: 256}}", f"{{id: b, model: {model}, ctx: 256}}"
    )


@pytest.mark.executor
def test_launch_group_prints_a_line_per_member_and_ctrl_c_stops_all(
    tmp_path: Path, tiny_llama: Path, llama_server: str
) -> None:
    group = _tiny_pair(tmp_path, tiny_llama)
    p = _start(["launch", "--group", str(group), "--no-config", "--quiet"], _env(llama_server))
    assert p.stdout is not None
    lines = []
    while not (line := p.stdout.readline()).startswith("all 2 ready"):
        assert line, "the launcher ended before its members were ready"
        lines.append(line)
    ready = [ln.split() for ln in lines if ln.startswith("ready ")]
    assert [r[:3] for r in ready] == [["ready", "a", "at"], ["ready", "b", "at"]], lines
    urls = [r[3] for r in ready]
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
    # Its kept log named, one line naming it, then its last log lines, as launch prints them.
    said = r.err.strip().splitlines()
    assert said[0].startswith("exedra-engine: broken's whole log: ")
    assert said[1].startswith("exedra-engine: error: group member 'broken' failed: llama-server")
    assert said[2] == "last log lines of the executor:" and len(said) > 3
    assert psutil.Process().children(recursive=True) == []
    r = run(
        "launch", "--group", str(group), "--no-config", "--quiet", "--json",
        env={"PATH": _env(llama_server)["PATH"]},
    )  # fmt: skip
    error = json.loads(r.out)["error"]
    assert r.code == 1 and error["member"] == "broken" and error["kind"] == "model-not-loaded"


def test_launch_group_fails_when_a_ready_member_exits_while_another_loads(
    tmp_path: Path, tiny_llama: Path, run: Run
) -> None:
    # Both members are the fake executor: "quits" exits 1 s after it is ready, "slow" is
    # ready only at 5 s. No "ready" line is printed for a group with a dead member.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shutil.copy(FAKE, bin_dir / "llama-server")
    group = _group_file(
        tmp_path,
        f"{{id: quits, model: {tiny_llama}, ctx: 256, env: {{FAKE_EXIT_AFTER: '1'}}}}",
        f"{{id: slow, model: {tiny_llama}, ctx: 256, env: {{FAKE_READY_AFTER: '5'}}}}",
    )
    r = run(
        "launch", "--group", str(group), "--no-config", "--quiet",
        env={"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
    )  # fmt: skip
    assert r.code == 1, r.err
    (line,) = [ln for ln in r.err.splitlines() if ln.startswith("exedra-engine: error: ")]
    assert line.startswith("exedra-engine: error: group member 'quits' failed: "), line
    assert "after it was ready" in line and "ready" not in r.out
    assert psutil.Process().children(recursive=True) == []


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
    group = _tiny_pair(tmp_path, tiny_llama)
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

    group = _tiny_pair(tmp_path, tiny_llama)
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


# -- launch --group's checks and logs, with fake executors whose --help lists a few flags -------

_LLAMA_HELP = """\
----- common params -----

-h,    --help, --usage                  print usage and exit
--version                               show version and build info
-t,    --threads N                      number of CPU threads to use during generation
-c,    --ctx-size N                     size of the prompt context (default: 4096)
--temp N                                temperature (default: 0.8)
"""
_WHISPER_HELP = """\

usage: whisper-server [options]

options:
  -h,        --help              [default] show this help message and exit
  -t N,      --threads N         [4      ] number of threads to use during computation
  -l LANG,   --language LANG     [en     ] spoken language
  --host HOST,                   [127.0.0.1] Hostname/ip-adress for the server
  --port PORT,                   [8080   ] Port number for the server
"""


@pytest.fixture
def fakes(tmp_path: Path) -> Path:
    """A directory of a llama-server and a whisper-server: each answers --help with a few of
    its real flags (so launch judges by the binary's own table), and otherwise runs the fake
    executor, noting each start in ``started``."""
    from tests.conftest import FAKE

    d = tmp_path / "bin"
    d.mkdir()
    for name, text in (("llama-server", _LLAMA_HELP), ("whisper-server", _WHISPER_HELP)):
        exe = d / name
        exe.write_text(
            "#!/bin/sh\n"
            f"if [ \"$1\" = --help ]; then cat <<'EOF'\n{text}EOF\nexit 0; fi\n"
            '[ "$1" = --version ] && exit 0\n'
            # Asked for its devices (planning does): a question, not a start.
            f'[ "$1" = --list-devices ] && exec {sys.executable} {FAKE} "$@"\n'
            f'echo "$0 $*" >> {d}/started\n'
            f'exec {sys.executable} {FAKE} "$@"\n'
        )
        exe.chmod(0o755)
    return d


def _fake_env(fakes: Path, tmp_path: Path) -> dict[str, str]:
    return {
        "PATH": f"{fakes}{os.pathsep}{os.environ['PATH']}",
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "EXEDRA_EXECUTORS_BIN": str(fakes),
    }


def _served_pair(tmp_path: Path, fakes: Path, *extra: str) -> tuple[list[str], str]:
    """``launch --group`` of two fake members until all are ready, then Ctrl-C: its stdout
    lines until ``all 2 ready``, and its stderr (after a clean stop)."""
    from exedra_engine.testing import write_tiny_llama

    write_tiny_llama(tmp_path / "a.gguf")
    group = _group_file(tmp_path, "{id: a, model: a.gguf, ctx: 256}", "{id: b, model: a.gguf}")
    p = _start(["launch", "--group", str(group), "--no-config", *extra],
               {**os.environ, **_fake_env(fakes, tmp_path)})  # fmt: skip
    assert p.stdout is not None
    out = []
    while not (line := p.stdout.readline()).startswith("all 2 ready"):
        assert line, "the launcher ended before its members were ready"
        out.append(line)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    return out, err


@pytest.mark.parametrize(
    ("member_b", "extra", "said"),
    [
        (
            "{id: b, model: a.gguf, args: [--ctx-szie, '256']}",
            (),
            "members[1] (b): --ctx-szie in caller args[0]: llama-server has no flag --ctx-szie",
        ),
        (
            "{id: b, model: w.bin, kind: transcribe}",
            ("--arg=--temp", "--arg=0.5"),
            "members[1] (b): --temp in caller args[0]: --temp is a flag of llama-server",
        ),
        ("{id: b, model: nope/x.gguf}", (), "members[1] (b): model {d}/nope/x.gguf does not exist"),
        ("{id: b, model: fifo.gguf}", (), "members[1] (b): model {d}/fifo.gguf is not a regular"),
        (
            "{id: b, model: a.gguf, executor: a.gguf}",
            (),
            "members[1] (b): executor {d}/a.gguf is not executable",
        ),
    ],
)
def test_launch_group_checks_every_member_as_launch_does_and_starts_nothing(
    tmp_path: Path, fakes: Path, run: Run, member_b: str, extra: tuple[str, ...], said: str
) -> None:
    from exedra_engine.testing import write_tiny_llama, write_tiny_whisper

    write_tiny_llama(tmp_path / "a.gguf")
    write_tiny_whisper(tmp_path / "w.bin")
    os.mkfifo(tmp_path / "fifo.gguf")
    group = _group_file(tmp_path, "{id: a, model: a.gguf, ctx: 256}", member_b)
    r = run("launch", "--group", str(group), "--no-config", *extra, env=_fake_env(fakes, tmp_path))
    assert r.code == 2, r.err
    (line,) = r.err.strip().splitlines()
    assert line.startswith(f"exedra-engine: error: {group}:"), line
    assert said.format(d=tmp_path) in line, line
    assert not (fakes / "started").exists()  # nothing was started
    assert psutil.Process().children(recursive=True) == []


def test_launch_group_on_no_terminal_tags_each_line_and_says_what_each_member_serves(
    tmp_path: Path, fakes: Path
) -> None:
    out, err = _served_pair(tmp_path, fakes)
    starts = [ln for ln in out if ln.startswith("ready")]
    assert [ln.split()[1] for ln in starts] == ["a", "b"]
    assert sum(ln.startswith("try       curl -s http://127.0.0.1:") for ln in out) == 2
    assert sum(ln.startswith("memory    ctx ") for ln in out) == 2
    logged = [ln for ln in err.splitlines() if "fake executor: listening" in ln]
    assert sorted(ln.split(":", 1)[0] for ln in logged) == ["a", "b"], err


def test_launch_group_quiet_keeps_one_0600_log_per_member_named_on_its_ready_lines(
    tmp_path: Path, fakes: Path
) -> None:
    out, err = _served_pair(tmp_path, fakes, "--quiet")
    assert "fake executor" not in err, err
    logs = [ln.split()[1] for ln in out if ln.startswith("log ")]
    assert [Path(f).name.split("-")[0] for f in logs] == ["a", "b"]
    for f in map(Path, logs):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
        assert "fake executor: listening" in f.read_text() and "a: " not in f.read_text()


def test_an_executor_for_a_group_comes_from_the_file_or_from_executor(
    tmp_path: Path, fakes: Path, run: Run
) -> None:
    from exedra_engine.testing import write_tiny_llama, write_tiny_whisper

    write_tiny_llama(tmp_path / "a.gguf")
    write_tiny_whisper(tmp_path / "w.bin")
    other = tmp_path / "other" / "llama-server"
    other.parent.mkdir()
    shutil.copy(fakes / "llama-server", other)
    group = _group_file(
        tmp_path,
        "{id: a, model: a.gguf, executor: other/llama-server}",
        "{id: b, model: a.gguf}",
        "{id: asr, model: w.bin, kind: transcribe}",
    )
    env = _fake_env(fakes, tmp_path)

    def commands(*extra: str) -> list[str]:
        r = run("plan", "--group", str(group), "--no-config", "--json", *extra, env=env)
        assert r.code == 0, r.err
        return [p["command"] for p in json.loads(r.out)["plans"]]

    assert commands() == [str(other), str(fakes / "llama-server"), str(fakes / "whisper-server")]
    third = tmp_path / "third" / "llama-server"
    third.parent.mkdir()
    shutil.copy(fakes / "llama-server", third)
    got = commands("--executor", str(third))  # the llama members that name none
    assert got == [str(other), str(third), str(fakes / "whisper-server")]
    r = run("plan", "--group", str(group), "--no-config", "--executor", str(tmp_path / "a.gguf"),
            env=env)  # fmt: skip
    assert r.code == 2 and "set executor: per member in the group file" in r.err


@pytest.mark.parametrize(
    ("option", "said"),
    [(("--measure",), "--measure measures one model's plan on this machine")],
)
def test_what_a_group_does_instead_is_said_when_an_option_does_not_go_with_it(
    run: Run, tmp_path: Path, option: tuple[str, ...], said: str
) -> None:
    group = _group_file(tmp_path, "{id: a, model: a.gguf}")
    r = run("plan", "--group", str(group), *option)  # launch has neither option
    assert r.code == 2 and said in r.err, r.err
    assert "a group file sets them per member" not in r.err


def test_launch_group_with_a_hardware_file_says_so_and_refuses_its_absent_binaries(
    tmp_path: Path, run: Run
) -> None:
    from exedra_engine.testing import write_tiny_llama

    write_tiny_llama(tmp_path / "a.gguf")
    hw = tmp_path / "hw.json"
    hw.write_text(json.dumps({
        "cpu": {"threads": 2, "ram": 8 << 30, "available": 6 << 30}, "gpus": [],
        "executors": [{"kind": "llama", "path": str(tmp_path / "elsewhere/llama-server")}],
    }))  # fmt: skip
    group = _group_file(tmp_path, "{id: a, model: a.gguf, ctx: 256}")
    r = run("launch", "--group", str(group), "--no-config", "--hardware", str(hw))
    assert r.code == 2
    assert f"note: --hardware {hw}: the members' shares" in r.err
    assert "its executor" in r.err and "does not exist on this host" in r.err
