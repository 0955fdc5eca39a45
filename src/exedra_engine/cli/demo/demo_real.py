"""The demo's second half: when the real model that ``./dev test`` fetches (Gemma 3 270M,
scripts/fetch_model.py) is in the user cache, ask it something it can answer.

It is a base model without a chat template: llama-server would format a chat request in
ChatML, which it was never trained on (see ``inspect``, and the plan's ``no-chat-template``
note). A base model continues text, so it is asked for a completion, greedily.
"""

from __future__ import annotations

import json
import secrets
import sys
import urllib.error
import urllib.request
from typing import Any

import trio

from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._core.executors.kinds import Kind
from exedra_engine._core.values import Constraints, ModelSpec
from exedra_engine._shell.plan import PlanRequest, explain_request
from exedra_engine._shell.probe import host_hardware
from exedra_engine._trio.launcher import open_instance
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.testing.lookups import find_real_model, real_model_path

PROMPT = "The capital of France is the city of"
"""A completion a base model answers sensibly: Gemma 3 270M continues it with " Paris"
(greedy, llama-server of this project's build; "The capital of France is" alone continues
"the capital of the country of France")."""


def complete(url: str, key: str, prompt: str) -> str:
    """One greedy completion of `prompt`, up to the end of its sentence."""
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "stop": ["."]}
    req = urllib.request.Request(
        url + LLAMA.completions_path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        result: dict[str, Any] = json.loads(resp.read())
    return str(result["choices"][0]["text"])


async def ask_real_model() -> int:
    """Plan, launch and ask the real model, when it is there; 0 when it is not (a line says
    how to fetch it) or when it answered and stopped cleanly."""
    model = find_real_model()
    if model is None:
        print(
            f"\nreal model  not in the cache ({real_model_path()}); "
            "python scripts/fetch_model.py fetches Gemma 3 270M (241 MiB) for the demo to ask"
        )
        return 0
    spec = ModelSpec(id="gemma-3-270m", path=str(model), kind=Kind.LLAMA, capabilities=("llm",))
    hw = await trio.to_thread.run_sync(host_hardware)
    req = PlanRequest(
        spec=spec,
        hardware=hw,
        constraints=Constraints(api_key=secrets.token_urlsafe(16), ctx=2048),
    )
    p = (await trio.to_thread.run_sync(explain_request, req)).plan
    bare = p.model is not None and p.model.chat_template == 0
    print(
        f"\nreal model  {model.name}"
        + (" (no chat template: asked for a completion)" if bare else " (asked for a completion)")
    )
    async with open_instance(p, ready_timeout=180) as inst:
        try:
            text = await trio.to_thread.run_sync(
                complete, inst.endpoint.url, inst.endpoint.api_key, PROMPT, abandon_on_cancel=True
            )
        except (urllib.error.URLError, OSError) as e:
            print(f"exedra-engine: error: the real model did not answer: {e}", file=sys.stderr)
            return 1
        reason = await inst.stop(STOP_TIMEOUT)
    print(f"prompt      {PROMPT!r}")
    print(f"answer      {text!r}")
    print(f"stopped     {reason.describe()}")
    return 0 if reason.clean else 1
