"""An embeddings member as the how-to writes it (`capabilities: [embeddings]`, nothing else),
planned with the group planner beside a chat member of the same file and launched with the
real llama-server and the real Gemma 3 270M: `/v1/embeddings` answers one pooled vector for a
short input and for one of about 1,500 tokens (llama.cpp's default ubatch, 512, refuses it).
Public API only."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

import exedra_engine as engine
from tests.http_client import http

pytestmark = [pytest.mark.executor, pytest.mark.slow]

_GEMMA_WIDTH = 640
"""Gemma 3 270M's embedding length: a pooled vector has this many numbers."""


def _long_text(url: str, tokens: int) -> tuple[str, int]:
    """A text of at least `tokens` tokens, by repetition, and its count by the server's own
    tokenizer."""
    unit = "The quick brown fox jumps over the lazy dog near the river bank. "
    text = unit
    while True:
        code, out = http(url + "/tokenize", {"content": text})
        assert code == 200, out
        n = len(out["tokens"])
        if n >= tokens:
            return text, n
        text = unit * (len(text) // len(unit) * tokens // max(n, 1) + 1)


def test_the_how_tos_embeddings_member_answers_one_pooled_vector_for_a_long_input(
    real_hw: engine.Hardware, real_model: Path
) -> None:
    def member(name: str, caps: tuple[str, ...], **c: Any) -> engine.GroupMember:
        spec = engine.ModelSpec(
            id=name, path=str(real_model), kind=engine.Kind.LLAMA, capabilities=caps
        )
        return engine.GroupMember(spec=spec, constraints=engine.Constraints(**c))

    members = (member("chat", ("llm",), ctx=512), member("embed", ("embeddings",)))
    group = engine.plan_group_on_host(members, real_hw).unwrap()
    embed = group.plans[1]
    assert "--pooling" in embed.args and "--ubatch-size" in embed.args

    def ask(running: Mapping[str, Any]) -> dict[str, Any]:
        url = running["embed"].endpoint.url
        text, n = _long_text(url, 1500)
        short = http(url + "/v1/embeddings", {"input": "hi"})
        start = time.monotonic()
        long = http(url + "/v1/embeddings", {"input": text})
        return {"short": short, "long": long, "n": n, "took": time.monotonic() - start}

    with engine.run_group(group, ready_timeout=120) as running:
        got = ask(running)
    print(f"embeddings of {got['n']} tokens answered in {got['took']:.2f} s")
    assert got["n"] < 2000
    for what in ("short", "long"):
        code, out = got[what]
        assert code == 200, (what, code)
        assert len(out["data"]) == 1, what  # one pooled vector, not one per token
        vector = out["data"][0]["embedding"]
        assert len(vector) == _GEMMA_WIDTH and all(isinstance(x, float) for x in vector), what
