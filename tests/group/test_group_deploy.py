"""A group plan reviewed, then deployed as reviewed: ``plan --group --json`` is what ``emit``
and ``launch --group`` take (nothing probed or planned again, the same units as ``plan
--group --emit``); ``--check`` and ``--strict`` mean for a group what they mean for one plan;
what the plan could not size is said, naming the member; a Kubernetes member asks for CPUs,
not this host's CPU ids, and for its planned peak; llama-swap reaches whisper on its
OpenAI path and says how to run it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import yaml

from exedra_engine._core.group.values import GroupPlan
from exedra_engine.testing import write_tiny_llama, write_tiny_whisper
from tests.cli.test_signals_in_every_phase import _no_launcher_left, _start  # noqa: F401
from tests.conftest import FAKE, cli, outside_tmp
from tests.http_client import http

PLAN = ("--no-config", "--no-port-check")


@pytest.fixture
def models() -> Iterator[Path]:
    """The models' directory: where a Quadlet container's user can reach them (a unit
    that cannot is refused, as for one plan)."""
    d = outside_tmp(f"group-deploy-{os.getpid()}")
    d.mkdir(parents=True)
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def _group_file(tmp_path: Path, models: Path | None = None, *, asr: str = "") -> Path:
    """chat (a tiny llama) and asr (a tiny whisper; `asr`: another path for its model), in
    `models` (default `tmp_path`)."""
    d = models or tmp_path
    write_tiny_llama(d / "a.gguf")
    write_tiny_whisper(d / "w.bin")
    f = tmp_path / "group.yaml"  # ctx 256: the tiny model's own (more is a finding)
    f.write_text(
        "members:\n"
        f"  - {{id: chat, model: {d}/a.gguf, ctx: 256}}\n"
        f"  - {{id: asr, model: {asr or d / 'w.bin'}, kind: transcribe}}\n"
    )
    return f


def _saved(tmp_path: Path, group: Path, hardware: str, *more: str) -> Path:
    r = cli("plan", "--group", str(group), "--hardware", hardware, *PLAN, *more, "--json")
    assert r.code == 0, r.err
    out = tmp_path / "group-plan.json"
    out.write_text(r.out)
    return out


def _files(out: Path) -> dict[str, str]:
    return {f.name: f.read_text() for f in sorted(out.iterdir())}


@pytest.mark.parametrize(
    ("target", "host"),
    [("k8s", "0.0.0.0"), ("quadlet", "0.0.0.0"), ("router", ""), ("llama-swap", "")],
)
def test_a_saved_group_plan_emits_the_same_files_as_plan_group_emit(
    tmp_path: Path, hardware: str, models: Path, target: str, host: str
) -> None:
    group = _group_file(tmp_path, models)
    on = ("--host", host) if host else ()
    saved = _saved(tmp_path, group, hardware, *on)
    out = tmp_path / "out"  # one directory: the router's and llama-swap's run lines name it
    out.mkdir()
    r = cli("plan", "--group", str(group), "--hardware", hardware, *PLAN, *on,
            "--emit", target, "--out", str(out), "--name", "pair")  # fmt: skip
    assert r.code == 0, r.err
    planned = _files(out)
    for f in out.iterdir():
        f.unlink()
    # The group file is gone: the saved plan is all that emit reads.
    group.unlink()
    r = cli("emit", str(saved), "--target", target, "--out", str(out), "--name", "pair")
    assert r.code == 0, r.err
    assert _files(out) == planned and planned


def test_a_saved_group_plan_is_decoded_by_group_plan_and_goes_to_the_launchers(
    tmp_path: Path, hardware: str
) -> None:
    saved = _saved(tmp_path, _group_file(tmp_path), hardware)
    group = msgspec.json.decode(saved.read_bytes(), type=GroupPlan)
    assert group.ids == ("chat", "asr")
    assert msgspec.json.decode(msgspec.json.encode(group), type=GroupPlan) == group


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda g: g["shares"].pop(), "2 plans for 1 shares"),
        (lambda g: g["shares"][0].update(colour="red"), "shares[0]: Object contains unknown"),
        (lambda g: g["shares"].reverse(), "plans[0]: its model id 'chat' is not its share's"),
    ],
)
def test_an_edited_group_plan_is_refused_naming_the_file_and_the_field(
    tmp_path: Path, hardware: str, edit: object, said: str
) -> None:
    saved = _saved(tmp_path, _group_file(tmp_path), hardware)
    g = json.loads(saved.read_text())
    edit(g)  # type: ignore[operator]
    saved.write_text(json.dumps(g))
    r = cli("emit", str(saved), "--target", "k8s")
    assert r.code == 2 and r.out == ""
    assert r.err.startswith(f"exedra-engine: error: {saved}: ") and said in r.err, r.err


def test_group_targets_need_a_group_plan(tmp_path: Path, hardware: str) -> None:
    write_tiny_llama(tmp_path / "a.gguf")
    r = cli("plan", "--model", str(tmp_path / "a.gguf"), "--kind", "llama", "--hardware",
            hardware, *PLAN, "--json")  # fmt: skip
    single = tmp_path / "plan.json"
    single.write_text(r.out)
    r = cli("emit", str(single), "--target", "llama-swap")
    assert r.code == 2 and "--target llama-swap serves several models" in r.err


def test_check_reads_back_every_members_files_and_names_the_edited_member(
    tmp_path: Path, hardware: str
) -> None:
    saved = _saved(tmp_path, _group_file(tmp_path), hardware, "--host", "0.0.0.0")
    out = tmp_path / "k8s"
    out.mkdir()
    argv = ("emit", str(saved), "--target", "k8s", "--out", str(out), "--name", "pair")
    assert cli(*argv).code == 0
    r = cli(*argv, "--check")
    assert r.code == 0, r.err
    assert r.out.startswith("ok: pair-asr.yaml, pair-chat.yaml match the plan (k8s)")
    f = out / "pair-asr.yaml"
    f.write_text(f.read_text().replace("- --port\n        - '18081'", "- --port\n        - '9'"))
    r = cli(*argv, "--check")
    assert r.code == 1
    assert "note: pair-asr.yaml differs from what the plan emits" in r.out
    assert "exedra-engine: check: member asr: " in r.err and "member chat" not in r.err


def test_check_of_a_llama_swap_file_is_its_bytes(tmp_path: Path, hardware: str) -> None:
    saved = _saved(tmp_path, _group_file(tmp_path), hardware)
    out = tmp_path / "swap"
    out.mkdir()
    argv = ("emit", str(saved), "--target", "llama-swap", "--out", str(out))
    assert cli(*argv).code == 0
    assert cli(*argv, "--check").code == 0
    (f,) = out.iterdir()
    f.write_text(f.read_text().replace("healthCheckTimeout: 120", "healthCheckTimeout: 20"))
    r = cli(*argv, "--check")
    assert r.code == 1 and f"{f.name} differs from what the plan emits" in r.err


def test_strict_refuses_a_group_whose_member_has_findings_naming_it(
    tmp_path: Path, hardware: str
) -> None:
    group = _group_file(tmp_path)
    argv = ("plan", "--group", str(group), "--hardware", hardware, *PLAN)
    assert cli(*argv, "--strict").code == 0
    group.write_text(group.read_text().replace("ctx: 256}", "ctx: 256, args: [--ctx-sise, '1']}"))
    assert cli(*argv).code == 0  # a warning without --strict, as for one plan
    for more in ((), ("--json",), ("--emit", "llama-swap")):
        r = cli(*argv, "--strict", *more)
        assert r.code == 2 and r.out == "", more
        assert "--strict: member chat has findings" in r.err and "--ctx-sise" in r.err


def test_a_member_the_plan_could_not_size_is_said_and_refused_with_strict(
    tmp_path: Path, hardware: str, models: Path
) -> None:
    # The whisper model is on the other host only: its memory cannot be planned here.
    group = _group_file(tmp_path, models, asr="/srv/absent/w.bin")
    saved = _saved(tmp_path, group, hardware, "--host", "0.0.0.0")
    out = tmp_path / "units"
    out.mkdir()
    argv = ("emit", str(saved), "--target", "quadlet", "--out", str(out), "--name", "pair")
    r = cli(*argv)
    assert r.code == 0, r.err
    assert "exedra-engine: warning: member asr gets no memory limit: its model " in r.err
    assert "chat" not in r.err
    assert "Memory=" not in (out / "pair-asr.container").read_text()
    assert "Memory=" in (out / "pair-chat.container").read_text()
    for f in out.iterdir():
        f.unlink()
    r = cli(*argv, "--strict")
    assert r.code == 2 and "--strict: the group plan could not size every member" in r.err
    assert list(out.iterdir()) == []  # nothing written


def test_kubernetes_members_request_cpus_and_their_planned_peak_not_this_hosts_cpu_ids(
    tmp_path: Path, hardware: str
) -> None:
    saved = _saved(tmp_path, _group_file(tmp_path), hardware, "--host", "0.0.0.0")
    group = msgspec.json.decode(saved.read_bytes(), type=GroupPlan)
    assert "--cpu-range" in group.plan_of("chat").args  # pinned on the host it was planned for
    r = cli("emit", str(saved), "--target", "k8s", "--name", "pair")
    assert r.code == 0, r.err
    docs = [d for d in yaml.safe_load_all(r.out) if d and d["kind"] == "Deployment"]
    by_name = {d["metadata"]["name"]: d["spec"]["template"]["spec"]["containers"][0] for d in docs}
    for member, c in (("chat", by_name["pair-chat"]), ("asr", by_name["pair-asr"])):
        argv = [*c.get("command", []), *c.get("args", [])]
        assert not {"--cpu-range", "--cpu-strict", "--cpu-mask"} & set(argv), argv
        share = next(s for s in group.shares if s.id == member)
        assert argv[argv.index("--threads") + 1] == str(share.threads)
        assert c["resources"]["requests"]["cpu"] == str(share.threads)
    asr = next(s for s in group.shares if s.id == "asr")
    assert 0 < asr.resident < asr.memory
    mib = 1 << 20
    requests = by_name["pair-asr"]["resources"]["requests"]
    assert requests["memory"] == f"{-(-asr.resident // mib)}Mi"  # its peak, not its share
    assert by_name["pair-asr"]["resources"]["limits"]["memory"] == f"{-(-asr.memory // mib)}Mi"


def test_llama_swap_serves_whisper_on_its_openai_path_and_says_how_to_run_it(
    tmp_path: Path, hardware: str
) -> None:
    saved = _saved(tmp_path, _group_file(tmp_path), hardware)
    out = tmp_path / "swap"
    out.mkdir()
    r = cli("emit", str(saved), "--target", "llama-swap", "--out", str(out))
    assert r.code == 0, r.err
    path = out / "exedra-group-llama-swap.yaml"
    text = path.read_text()
    run = next(line for line in text.splitlines() if line.startswith("# run: "))
    assert shlex.split(run[len("# run: ") :])[:3] == ["llama-swap", "--config", str(path)]
    models = yaml.safe_load(text)["models"]
    asr = shlex.split(models["asr"]["cmd"])
    assert asr[asr.index("--inference-path") + 1] == "/v1/audio/transcriptions"
    assert "--inference-path" not in models["chat"]["cmd"]


@pytest.mark.serial
def test_launch_group_runs_a_saved_plan_as_saved(tmp_path: Path) -> None:
    # The fake executor stands for llama-server: it serves /health on the plan's port.
    hw = tmp_path / "fake-hw.json"
    hw.write_text(
        json.dumps(
            {
                "cpu": {"threads": 2, "ram": 8 << 30, "available": 6 << 30},
                "executors": [{"kind": "llama", "path": str(FAKE), "backends": ["cpu"]}],
            }
        )
    )
    from exedra_engine.testing import free_port

    group = tmp_path / "group.yaml"
    group.write_text(
        "members:\n"
        f"  - {{id: a, model: /srv/a.gguf, env: {{FAKE_MODE: ok}}, port: {free_port()}}}\n"
        f"  - {{id: b, model: /srv/b.gguf, env: {{FAKE_MODE: ok}}, port: {free_port()}}}\n"
    )
    saved = _saved(tmp_path, group, str(hw))
    group.unlink()
    plans = json.loads(saved.read_text())["plans"]
    p = _start(["launch", "--group", str(saved), "--quiet"], dict(os.environ))
    assert p.stdout is not None
    lines = []
    while not (line := p.stdout.readline()).startswith("all 2 ready"):
        assert line, "the launcher ended before its members were ready"
        lines.append(line)
    ready = [ln.split()[:4] for ln in lines if ln.startswith("ready ")]
    assert ready == [
        ["ready", "a", "at", f"http://127.0.0.1:{plans[0]['port']}"],
        ["ready", "b", "at", f"http://127.0.0.1:{plans[1]['port']}"],
    ], lines
    assert http(ready[0][3] + "/health")[0] == 200
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err


def test_a_saved_keyed_group_reads_its_key_again_from_its_variable(
    tmp_path: Path, hardware: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from exedra_engine.cli.plan.saved_plan import keyed_again, saved_group
    from exedra_engine.errors import PlanError

    monkeypatch.setenv("GROUP_KEY", "k-saved-group-0123456789")
    saved = _saved(tmp_path, _group_file(tmp_path), hardware, "--api-key-env", "GROUP_KEY")
    assert "k-saved-group-0123456789" not in saved.read_text()  # never saved
    group = saved_group(str(saved))
    assert group is not None
    chat = keyed_again(group, str(saved), {"GROUP_KEY": "k-later-9876543210"}).plan_of("chat")
    assert chat.api_key == "k-later-9876543210"
    assert "<redacted>" not in " ".join([*chat.args, *chat.env])
    assert "k-later-9876543210" in " ".join([*chat.args, *chat.env])
    with pytest.raises(PlanError, match=r"member chat: its API key was redacted .* set GROUP_KEY"):
        keyed_again(group, str(saved), {})


def test_launching_a_saved_group_plan_refuses_options_that_would_plan_again(
    tmp_path: Path, hardware: str
) -> None:
    saved = _saved(tmp_path, _group_file(tmp_path), hardware)
    r = cli("launch", "--group", str(saved), "--arg=--temp", "--arg=0.5", "--host", "::1")
    assert r.code == 2 and r.out == ""
    assert "--host, --arg do not go with a saved group plan" in r.err
