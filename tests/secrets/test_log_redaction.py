"""Keys in an executor's log lines: hidden where they stand as a token, whatever their length,
without turning every short word that contains them into noise."""

from __future__ import annotations

import io
import re

from hypothesis import given
from hypothesis import strategies as st

from exedra_engine._core.secrets import (
    REDACTED,
    SHORT_KEY,
    TextRedactor,
    plan_secrets,
    redact_text,
)
from exedra_engine._trio.logs import LogPump
from exedra_engine.cli import render
from tests.log_pump import feed

KEY = st.text(
    st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters=","),
    min_size=1,
    max_size=24,
)
WORDS = st.lists(
    st.one_of(st.text("abcdefk_19-./:=\"' ", max_size=12), st.just("{key}")), max_size=12
)


def _as_token(key: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(key)}(?![A-Za-z0-9_])")


@given(key=KEY, words=WORDS)
def test_no_key_survives_as_a_token(key: str, words: list[str]) -> None:
    line = " ".join(w.replace("{key}", key) for w in words)
    out = redact_text(line, [key])
    shown = out.replace(REDACTED, " ")
    assert not _as_token(key).search(shown)
    if len(key) >= SHORT_KEY:
        assert key not in shown
    if key not in line:
        assert out == line  # nothing else is touched


def test_a_short_key_inside_a_word_is_left_alone() -> None:
    r = TextRedactor(["k"])
    assert r.text("loading gemma-3-270m-q4_k_m.gguf") == "loading gemma-3-270m-q4_k_m.gguf"
    assert r.text("Authorization: Bearer k") == f"Authorization: Bearer {REDACTED}"
    assert r.text('{"api_key": "k"}') == f'{{"api_key": "{REDACTED}"}}'


def test_a_long_key_is_hidden_anywhere() -> None:
    r = TextRedactor(["sk-0123456789"])
    assert r.text("xsk-0123456789y") == f"x{REDACTED}y"


def test_a_key_that_contains_another_goes_first() -> None:
    assert redact_text("k=secretkey123", ["secretkey123", "secret"]) == f"k={REDACTED}"


async def test_the_log_pump_forwards_and_keeps_redacted_lines() -> None:
    sink = io.BytesIO()
    pump = LogPump(sink, ("k", "sk-0123456789"))
    await feed(pump, b"model q4_k_m.gguf\nauth Bearer k\r\nkey sk-0123456789 \xff\n")
    assert sink.getvalue() == (
        b"model q4_k_m.gguf\nauth Bearer <redacted>\r\nkey <redacted> \xff\n"
    )
    assert list(pump.tail) == [
        "model q4_k_m.gguf",
        "auth Bearer <redacted>\r",
        "key <redacted> \ufffd",
    ]


def test_plan_secrets_are_every_secret_the_executor_is_handed() -> None:
    args = ("--port", "8080", "--api-key", "a,b", "--hf-token=hft1", "-hft", "t2", "--ctx", "9")
    env = ("HF_TOKEN=tok", "LLAMA_API_KEY=", "PATH=/bin", "MY_PASSWORD=pw")
    assert set(plan_secrets(args, env)) == {"a,b", "a", "b", "hft1", "t2", "tok", "pw"}


def test_host_name_given_to_host_is_not_masked() -> None:
    try:
        given = {"localhost": "--host", "inference-box": "--host", "Xk9qL2vRt7": "--host"}
        render.hide_values({**given, "localhost2x": "--name"})
        said = "couldn't bind HTTP server socket, hostname: {}, port: 8080"
        assert render.unechoed(said.format("localhost")) == said.format("localhost")
        assert render.unechoed(said.format("inference-box")) == said.format("inference-box")
        # A value in a key's form stays hidden, --host or not.
        assert "Xk9qL2vRt7" not in render.unechoed(said.format("Xk9qL2vRt7"))
        assert "localhost2x" not in render.unechoed("x localhost2x y")
    finally:
        render.hide_values({})
