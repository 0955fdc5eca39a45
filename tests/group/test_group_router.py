"""llama.cpp's router mode for a group's llama members: the models preset INI (each section
linted), ``--models-max`` from the memory plan, and the real router serving both models on
demand."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import trio

import exedra_engine as engine
from exedra_engine._core.emit.group.router import models_max, router_plan, router_preset
from exedra_engine._core.group.values import GroupPlan, MemberShare
from exedra_engine._core.plan.launch_plan import read_plan
from exedra_engine.errors import EmitError
from exedra_engine.testing import free_port
from tests.http_client import health, http

HW = engine.Hardware(
    cpu=engine.CPU(threads=4),
    executors=(
        engine.ExecutorInfo(kind=engine.Kind.LLAMA, path="/opt/llama/llama-server"),
        engine.ExecutorInfo(kind=engine.Kind.TRANSCRIBE, path="/opt/whisper/whisper-server"),
    ),
)


def _plan(name: str, kind: engine.Kind = engine.Kind.LLAMA, **kw: object) -> engine.LaunchPlan:
    spec = engine.ModelSpec(id=name, path=f"/srv/{name}.gguf", kind=kind)
    return engine.plan_launch(spec, HW, engine.Constraints(**kw)).unwrap()  # type: ignore[arg-type]


def _group(*plans: engine.LaunchPlan, memory: tuple[int, ...] = (), budget: int = 0) -> GroupPlan:
    sizes = memory or (0,) * len(plans)
    shares = tuple(
        MemberShare(id=p.spec.id, port=p.port, memory=m) for p, m in zip(plans, sizes, strict=True)
    )
    return GroupPlan(plans=plans, shares=shares, budget=budget)


def _section(text: str, name: str) -> dict[str, str]:
    body = text.split(f"[{name}]\n", 1)[1].split("\n\n", 1)[0]
    return dict(line.split(" = ", 1) for line in body.splitlines())


def test_each_section_has_the_model_and_long_keys_and_drops_what_the_router_owns() -> None:
    chat = _plan(
        "chat",
        ctx=512,
        port=18100,
        api_key="k-secret-1",
        extra_args=("-t", "2", "--no-webui", "--alias", "x"),
        extra_env=("LLAMA_ARG_BATCH=64", "HF_HOME=/x"),
    )
    preset = router_preset(_group(chat, _plan("asr", engine.Kind.TRANSCRIBE, port=18101)))
    assert preset.members == ("chat",)  # whisper-server is not a llama member
    assert preset.text.splitlines()[1] == "version = 1"
    keys = _section(preset.text, "chat")
    assert keys["model"] == "/srv/chat.gguf" and next(iter(keys)) == "model"
    assert keys["ctx-size"] == "512" and keys["threads"] == "2" and keys["batch-size"] == "64"
    assert keys["webui"] == "false"
    assert not {"host", "port", "alias", "api-key", "t", "c"} & set(keys)
    assert "k-secret-1" not in preset.text
    assert any("--port" in d for d in preset.dropped)
    assert any(d.startswith("chat: HF_HOME") for d in preset.dropped)


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--chat-template", "a;b"), "would cut it"),
        (("--bogus-flag",), "not a flag llama-server knows"),
        (("--lora", "/a.gguf", "--lora", "/b.gguf"), "given twice"),
    ],
)
def test_a_section_the_preset_cannot_hold_is_refused_naming_member_and_flag(
    extra: tuple[str, ...], said: str
) -> None:
    with pytest.raises(EmitError, match=said) as caught:
        router_preset(_group(_plan("chat", port=18100, extra_args=extra)))
    assert "member chat" in str(caught.value)


def test_a_relative_model_path_is_refused() -> None:
    spec = engine.ModelSpec(id="chat", path="models/chat.gguf", kind=engine.Kind.LLAMA)
    plan = engine.plan_launch(spec, HW, engine.Constraints(port=18100)).unwrap()
    with pytest.raises(EmitError, match="not an absolute path"):
        router_preset(_group(plan))


def test_models_max_counts_the_largest_first() -> None:
    a, b, c = _plan("a", port=1), _plan("b", port=2), _plan("c", port=3)
    gib = 1 << 30
    # 6 + 3 fit in 10, the third would not: two at once, whichever two.
    assert (
        models_max(_group(a, b, c, memory=(3 * gib, 6 * gib, 3 * gib), budget=10 * gib), "abc") == 2
    )
    assert models_max(_group(a, b, c, memory=(1, 1, 1), budget=3), "abc") == 3
    # An unknown budget bounds nothing; one model is always allowed.
    assert models_max(_group(a, b, c, memory=(5, 5, 5)), "abc") == 3
    assert models_max(_group(a, memory=(9,), budget=4), "a") == 1


def test_the_router_plan_serves_the_preset_on_the_first_members_address() -> None:
    group = _group(_plan("chat", port=18100), _plan("b", port=18101), memory=(4, 4), budget=6)
    preset = router_preset(group)
    plan = router_plan(group, "/run/preset.ini", preset)
    assert plan.port == 18100 and plan.ready == "/models"
    assert plan.args[:4] == ("--models-preset", "/run/preset.ini", "--models-max", "1")
    keyed = _group(_plan("chat", port=18100, api_key="k-router-2"), memory=(4,), budget=6)
    plan = router_plan(keyed, "/run/preset.ini", router_preset(keyed))
    # The key travels in the environment; /models then wants it, /health does not.
    assert plan.env == ("LLAMA_API_KEY=k-router-2",) and plan.ready == "/health"
    assert "k-router-2" not in " ".join(plan.args)


def test_the_router_plan_is_merged_read_and_checked_as_every_plan_is() -> None:
    chat, asr = _plan("chat", port=18100), _plan("asr", engine.Kind.TRANSCRIBE, port=18101)
    group = _group(chat, asr)
    plan = router_plan(group, "/run/preset.ini", router_preset(group))
    # Its reading was made from its merge: the endpoint it listens on is the plan's.
    r = read_plan(plan).resolved()
    assert (r.host, r.port) == (plan.host, plan.port) == (chat.host, 18100)
    # A member the router does not serve, on the port it takes, is refused, naming it.
    moved = tuple("18100" if a == "18101" else a for a in asr.args)
    clash = _group(chat, msgspec.structs.replace(asr, args=moved))
    with pytest.raises(engine.PortInUse, match="port 18100, where member asr listens"):
        router_plan(clash, "/run/preset.ini", router_preset(clash))


# -- the real router --------------------------------------------------------------------------


@pytest.mark.executor
@pytest.mark.slow
def test_the_real_router_answers_for_both_models_on_demand(
    real_hw: engine.Hardware, real_model: Path, tiny_llama: Path, tmp_path: Path
) -> None:
    def member(name: str, path: Path, port: int) -> engine.LaunchPlan:
        spec = engine.ModelSpec(id=name, path=str(path), kind=engine.Kind.LLAMA)
        con = engine.Constraints(ctx=512, threads=1, port=port)
        return engine.plan(spec, real_hw, con).unwrap()

    port = free_port()
    chat, tiny = member("chat", real_model, port), member("tiny", tiny_llama, port + 1)
    group = GroupPlan(
        plans=(chat, tiny),
        shares=tuple(MemberShare(id=p.spec.id, port=p.port) for p in (chat, tiny)),
    )
    preset = router_preset(group)
    path = tmp_path / "router.ini"
    path.write_text(preset.text)
    plan = router_plan(group, str(path), preset)

    async def main() -> tuple[dict[str, object], dict[str, tuple[int, object]]]:
        async with engine.open_instance(plan, ready_timeout=60) as router:
            _, listed = await trio.to_thread.run_sync(http, router.endpoint.url + "/models")
            answers = {}
            for name in ("chat", "tiny"):
                body = {"model": name, "prompt": "Hello", "max_tokens": 4}
                answers[name] = await trio.to_thread.run_sync(
                    http, router.endpoint.url + "/v1/completions", body
                )
        return listed, answers

    listed, answers = trio.run(main)
    assert {m["id"] for m in listed["data"]} == {"chat", "tiny"}  # type: ignore[index]
    # Nothing was loaded until asked: each answer loaded its model on demand.
    assert all(m["status"]["value"] == "unloaded" for m in listed["data"])  # type: ignore[index]
    for name, (code, out) in answers.items():
        assert code == 200 and out["model"] == name, out  # type: ignore[index]
        assert out["usage"]["completion_tokens"] >= 1  # type: ignore[index]
    assert health(plan.url) == 0
    assert msgspec.json.decode(msgspec.json.encode(preset), type=type(preset)) == preset
