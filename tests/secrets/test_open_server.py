"""A plan with no API key keeps the web pages of other sites from calling its executor:
llama-server allows every origin by default, credentials included, so any page the user
visits could call the local model. The engine layer passes ``--cors-origins localhost``
(a layer's own value wins, a keyed plan gets nothing, a binary without the flag gets a
note instead), and the plan and launch say the executor is unauthenticated."""

from __future__ import annotations

import pytest

from exedra_engine import (
    CPU,
    Config,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    LaunchPlan,
    ModelSpec,
    Override,
    explain_launch,
    plan_launch,
)
from exedra_engine._core.executors.builtin import BUILTIN, executor_profile
from exedra_engine._core.executors.flags import table_from_rows
from exedra_engine._core.plan.engine_args import OPEN_CORS
from exedra_engine.cli.launch.launch_output import auth_note

HW = Hardware(
    cpu=CPU(threads=4),
    executors=(
        ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server"),
        ExecutorInfo(kind=Kind.TRANSCRIBE, path="/usr/bin/whisper-server"),
    ),
)
SPEC = ModelSpec(id="chat", path="/m/chat.gguf", kind=Kind.LLAMA)
LOCAL = ("--cors-origins", "localhost")
LLAMA = executor_profile(Kind.LLAMA)


def _plan(**kw: object) -> LaunchPlan:
    return plan_launch(SPEC, HW, Constraints(**kw)).unwrap()  # type: ignore[arg-type]


def _has(args: tuple[str, ...], pair: tuple[str, str]) -> bool:
    return any(args[i : i + 2] == pair for i in range(len(args)))


def test_a_plan_with_no_key_lets_only_local_web_pages_call_it() -> None:
    e = explain_launch(SPEC, HW).unwrap()
    assert _has(e.plan.args, LOCAL)
    assert [s.layer for s in e.sources if s.text == "--cors-origins localhost"] == ["engine"]


@pytest.mark.parametrize(
    "kw",
    [
        {"api_key": "k-0123456789"},
        {"extra_args": ("--api-key-file", "/etc/keys")},
        {"extra_env": ("LLAMA_API_KEY=k-0123456789",)},
    ],
    ids=["key", "key-file", "key-variable"],
)
def test_a_keyed_plan_gets_no_cors_flag(kw: dict[str, object]) -> None:
    assert "--cors-origins" not in _plan(**kw).args


@pytest.mark.parametrize(
    ("kw", "origins"),
    [
        ({"extra_args": ("--cors-origins", "*")}, "*"),
        ({"extra_env": ("LLAMA_ARG_CORS_ORIGINS=https://app.example",)}, ""),
        (
            {
                "overrides": Config(
                    engines={"llama": Override(args=("--cors-origins", "https://a"))}
                )
            },
            "https://a",
        ),
    ],
    ids=["caller-arg", "caller-variable", "config-layer"],
)
def test_a_layers_own_cors_origins_wins(kw: dict[str, object], origins: str) -> None:
    p = _plan(**kw)
    assert not _has(p.args, LOCAL)
    if origins:
        assert _has(p.args, ("--cors-origins", origins))
    else:
        assert (
            "--cors-origins" not in p.args and "LLAMA_ARG_CORS_ORIGINS=https://app.example" in p.env
        )


def test_a_binary_without_the_flag_gets_none_and_a_note_says_it_is_open() -> None:
    rows = tuple(r for r in LLAMA.flag_rows if "--cors-origins" not in r[0])
    table = table_from_rows(LLAMA.binary, rows, LLAMA.repeatable)
    e = explain_launch(SPEC, HW, flags=table).unwrap()
    assert "--cors-origins" not in e.plan.args
    (note,) = [f for f in e.findings if f.code == OPEN_CORS]
    assert note.severity == "note" and "any web page" in note.message
    keyed = explain_launch(SPEC, HW, Constraints(api_key="k-0123456789"), flags=table).unwrap()
    assert not [f for f in keyed.findings if f.code == OPEN_CORS]


def test_whisper_server_gets_no_cors_flag() -> None:
    spec = ModelSpec(id="asr", path="/m/w.bin", kind=Kind.TRANSCRIBE)
    assert "--cors-origins" not in plan_launch(spec, HW).unwrap().args


def test_the_notes_say_an_unkeyed_executor_is_unauthenticated() -> None:
    said = auth_note(_plan(), BUILTIN)
    assert said.startswith("unauthenticated") and "only from this machine" in said
    assert auth_note(_plan(api_key="k-0123456789"), BUILTIN) == ""
    opened = auth_note(_plan(extra_args=("--cors-origins", "*")), BUILTIN)
    assert opened.startswith("unauthenticated") and "this machine" not in opened
