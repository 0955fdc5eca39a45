"""Which members a llama.cpp router serves and which it cannot, said before anything starts:
``launch --group FILE --router`` starts a whisper member beside the router (its own ready
line) instead of dropping it, and every ``try`` line names the model it asks, so pasting
one works against the router; ``plan --group FILE --emit router`` names the member left out."""

from __future__ import annotations

import json
import shlex
import signal
from pathlib import Path

import pytest

import exedra_engine as engine
from exedra_engine._core.emit.group.router import router_plan, router_preset
from exedra_engine._core.emit.group.router_scope import beside_router, beside_texts, served_text
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.group.start import members
from exedra_engine._core.group.values import GroupPlan, MemberShare
from exedra_engine.cli.launch.launch_router import router_tries, with_router

# The launcher helpers, and the autouse fixture that stops a launcher a failed test left.
from tests.cli.test_signals_in_every_phase import _alive, _env, _no_launcher_left, _start  # noqa: F401
from tests.conftest import Run
from tests.http_client import http

HW = engine.Hardware(
    cpu=engine.CPU(threads=4),
    executors=(
        engine.ExecutorInfo(kind=engine.Kind.LLAMA, path="/opt/llama/llama-server"),
        engine.ExecutorInfo(kind=engine.Kind.TRANSCRIBE, path="/opt/whisper/whisper-server"),
    ),
)


def _plan(
    name: str, kind: engine.Kind = engine.Kind.LLAMA, caps: tuple[str, ...] = (), **kw: object
) -> engine.LaunchPlan:
    spec = engine.ModelSpec(id=name, path=f"/srv/{name}.gguf", kind=kind, capabilities=caps)
    return engine.plan_launch(spec, HW, engine.Constraints(**kw)).unwrap()  # type: ignore[arg-type]


def _group(*plans: engine.LaunchPlan) -> GroupPlan:
    shares = tuple(MemberShare(id=p.spec.id, port=p.port, memory=4 << 30) for p in plans)
    return GroupPlan(plans=plans, shares=shares, budget=16 << 30)


TRIO = _group(
    _plan("chat", port=18100),
    _plan("asr", engine.Kind.TRANSCRIBE, port=18101),
    _plan("embed", caps=("embeddings",), port=18102),
)


def test_the_router_names_what_it_serves_and_each_member_it_cannot() -> None:
    preset = router_preset(TRIO)
    assert preset.members == ("chat", "embed") and beside_router(TRIO, preset) == ("asr",)
    assert served_text(preset).startswith(
        'chat, embed: each loads on its first request naming it ("model": "chat")'
    )
    assert beside_texts(TRIO, preset) == (
        "asr (whisper-server) is not a llama.cpp router child: it runs on its own, beside the "
        "router, at http://127.0.0.1:18101",
    )
    llama_only = _group(_plan("chat", port=18100))
    assert beside_texts(llama_only, router_preset(llama_only)) == ()


def test_the_routers_curl_commands_name_each_model_and_ask_what_it_serves() -> None:
    keyed = _group(
        _plan("chat", port=18100, api_key="k-route-1", api_key_env="ROUTER_KEY"),
        _plan(
            "embed", caps=("embeddings",), port=18102, api_key="k-route-1", api_key_env="ROUTER_KEY"
        ),
    )
    preset = router_preset(keyed)
    router = router_plan(keyed, "/run/r.ini", preset)
    chat, embed = router_tries(keyed, preset, router, BUILTIN)
    for cmd, path, model in ((chat, "/v1/completions", "chat"), (embed, "/v1/embeddings", "embed")):
        words = shlex.split(cmd.replace("$ROUTER_KEY", "K"))
        assert words[2] == f"http://127.0.0.1:18100{path}"  # the router's address, not the member's
        assert json.loads(words[words.index("-d") + 1])["model"] == model
        assert "Authorization: Bearer K" in words  # the router's key, by its variable
    assert "k-route-1" not in chat + embed


def test_the_group_that_runs_is_the_router_and_the_members_beside_it() -> None:
    preset = router_preset(TRIO)
    router = router_plan(TRIO, "/run/r.ini", preset)
    both, name = with_router(TRIO, router, preset)
    assert name == "router" and [i for i, _ in members(both)] == ["router", "asr"]
    assert both.plans == (router, TRIO.plan_of("asr"))
    assert both.shares[0].memory == 8 << 30 and both.shares[1] == TRIO.shares[1]
    # a member already named "router" keeps its name; the router takes another
    clash = _group(_plan("chat", port=18100), _plan("router", engine.Kind.TRANSCRIBE, port=18101))
    preset = router_preset(clash)
    both, name = with_router(clash, router_plan(clash, "/r.ini", preset), preset)
    assert name == "llama-router" and both.ids == ("llama-router", "router")


def _group_file(tmp_path: Path, llama: Path, whisper: Path) -> Path:
    f = tmp_path / "group.yaml"
    f.write_text(
        "members:\n"
        f"  - {{id: chat, model: {llama}, ctx: 256}}\n"
        f"  - {{id: asr, model: {whisper}, kind: transcribe}}\n"
        f"  - {{id: more, model: {llama}, ctx: 256}}\n"
    )
    return f


@pytest.mark.executor
def test_emit_router_names_the_member_it_cannot_serve(
    tmp_path: Path, tiny_llama: Path, tiny_whisper: Path, llama_server: str, run: Run
) -> None:
    group = _group_file(tmp_path, tiny_llama, tiny_whisper)
    r = run(
        "plan", "--group", str(group), "--no-config", "--no-port-check", "--emit", "router",
        env={"PATH": _env(llama_server)["PATH"]},
    )  # fmt: skip
    assert r.code == 0, r.err
    said = (
        "asr (whisper-server) is not a llama.cpp router child: it runs on its own, beside the "
        "router"
    )
    assert f"exedra-engine: note: {said}" in r.err
    assert "exedra-engine: note: the router serves chat, more: each loads" in r.err
    assert f"; {said}" in r.out and "[asr]" not in r.out


@pytest.mark.executor
def test_launch_router_starts_the_whisper_member_beside_it_and_its_try_lines_work(
    tmp_path: Path, tiny_llama: Path, tiny_whisper: Path, llama_server: str, whisper_server: str
) -> None:
    group = _group_file(tmp_path, tiny_llama, tiny_whisper)
    argv = ["launch", "--group", str(group), "--router", "--no-config", "--quiet"]
    p = _start(argv, _env(llama_server))
    assert p.stdout is not None
    lines = []
    while not (line := p.stdout.readline()).startswith("all "):
        assert line, p.stderr.read() if p.stderr else ""
        lines.append(line.rstrip("\n"))
    # said before anything starts, then one ready line per process, each with its try lines
    assert lines[0].startswith("router    serves chat, more: each loads on its first request")
    assert lines[1].startswith("beside    asr (whisper-server) is not a llama.cpp router child")
    ready = {ln.split()[1]: ln.split()[3] for ln in lines if ln.startswith("ready ")}
    assert list(ready) == ["router", "asr"]
    assert len({ln.index("http://") for ln in lines if ln.startswith("ready ")}) == 1  # aligned
    tries = [shlex.split(ln[10:]) for ln in lines if ln.startswith("try ")]
    asked = {}
    for words in tries:
        if "-d" not in words:  # whisper's own: a file upload, at its own address
            assert words[2] == ready["asr"] + "/inference"
            continue
        body = json.loads(words[words.index("-d") + 1])
        code, out = http(words[2], body)  # pasted: the router answers the model it names
        assert code == 200, out
        asked[body["model"]] = out["model"]
    assert asked == {"chat": "chat", "more": "more"}
    assert http(ready["asr"] + "/health")[0] == 200
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "stopped   router" in err and "stopped   asr" in err


@pytest.mark.executor
def test_launch_router_json_keeps_stdout_to_json_lines(
    tmp_path: Path, tiny_llama: Path, tiny_whisper: Path, llama_server: str, whisper_server: str
) -> None:
    group = _group_file(tmp_path, tiny_llama, tiny_whisper)
    argv = ["launch", "--group", str(group), "--router", "--no-config", "--quiet", "--json"]
    p = _start(argv, _env(llama_server))
    assert p.stdout is not None
    ready = [json.loads(p.stdout.readline()) for _ in range(2)]  # nothing else before them
    assert [r["id"] for r in ready] == ["router", "asr"]
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0 and out == "", (out, err)
    assert "router    serves chat, more" in err and "beside    asr (whisper-server)" in err
