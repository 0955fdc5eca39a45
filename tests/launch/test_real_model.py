"""The real model: Gemma 3 270M Q4_K_M (241 MiB), which takes seconds to load on 2 cores.

The generated models are ready in 20 ms and hide what a real load does; these tests need the
load time. The model comes from the user cache (scripts/fetch_model.py, run by ./dev test); its
absence is a failure, never a skip (tests/conftest.py). Public API only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import trio

import exedra_engine as engine
from exedra_engine.testing import free_port
from tests.http_client import health, http

pytestmark = [pytest.mark.executor, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _spec(model: Path) -> engine.ModelSpec:
    return engine.ModelSpec(id="gemma", path=str(model), kind=engine.Kind.LLAMA)


def _executors_of(pid: int) -> list[psutil.Process]:
    """Live llama-server descendants of PID."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for k in kids:
        try:
            if "llama-server" in k.name() and k.status() != psutil.STATUS_ZOMBIE:
                out.append(k)
        except psutil.NoSuchProcess:
            pass
    return out


def test_inspect_reads_the_real_header(real_model: Path) -> None:
    info = engine.inspect(real_model).unwrap()
    assert info.architecture == "gemma3"
    assert info.quant == "Q4_K_M"
    assert info.blocks == 18
    assert info.context == 32768
    assert info.size == real_model.stat().st_size


async def test_launch_with_a_key_chat_and_stop(real_hw: engine.Hardware, real_model: Path) -> None:
    p = engine.plan(_spec(real_model), real_hw, engine.Constraints(api_key="k-270m", ctx=2048))
    plan = p.unwrap()
    async with engine.open_instance(plan, ready_timeout=120) as inst:
        url, key = inst.endpoint.url, inst.endpoint.api_key
        assert key == "k-270m"
        body = {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8}
        code, _ = await trio.to_thread.run_sync(lambda: http(url + "/v1/chat/completions", body))
        assert code == 401
        code, out = await trio.to_thread.run_sync(
            lambda: http(url + "/v1/chat/completions", body, key)
        )
        assert code == 200, out
        assert out["choices"][0]["message"]["content"].strip()
        pid = inst.pid
    assert inst.exit_reason is not None and inst.exit_reason.clean
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_stop_plan_launch_on_the_same_explicit_port_20_times(
    real_hw: engine.Hardware, real_model: Path
) -> None:
    """A supervisor's restart loop: each clean stop is followed at once by plan + launch on the
    same port. The poller's TIME_WAIT sockets must not make the port count as in use
    (llama-server binds with SO_REUSEADDR)."""
    port = free_port()
    for i in range(20):
        r = engine.plan(_spec(real_model), real_hw, engine.Constraints(port=port, ctx=512))
        assert r.value_or(None) is not None, f"round {i}: {r.failure()}"
        async with engine.open_instance(r.unwrap(), ready_timeout=120) as inst:
            assert inst.endpoint.url.endswith(f":{port}")
            code = await trio.to_thread.run_sync(lambda: health(inst.endpoint.url))
            assert code == 200, f"round {i}"


async def test_cancel_mid_load_leaves_no_process(
    real_hw: engine.Hardware, real_model: Path
) -> None:
    plan = engine.plan(_spec(real_model), real_hw, engine.Constraints(ctx=512)).unwrap()
    seen: list[int] = []

    async def watch(scope: trio.CancelScope) -> None:
        # Cancel the caller's scope while the server says 503 "Loading model".
        while True:
            code = await trio.to_thread.run_sync(lambda: health(plan.url))
            seen.append(code)
            if code == 503:
                scope.cancel()
                return
            if code == 200:
                return
            await trio.sleep(0.005)

    entered = False
    async with trio.open_nursery() as n:
        with trio.CancelScope() as scope:
            n.start_soon(watch, scope)
            async with engine.open_instance(plan, ready_timeout=120):
                entered = True
    assert 503 in seen, f"never saw the load (/health: {sorted(set(seen))})"
    assert not entered
    assert scope.cancelled_caught
    assert _executors_of(os.getpid()) == []
    assert health(plan.url) == 0


CHILD = textwrap.dedent(
    """
    import sys, trio
    import exedra_engine as engine

    async def main():
        hw = engine.probe().unwrap()
        hw = engine.Hardware(cpu=hw.cpu, gpus=hw.gpus, executors=(
            engine.ExecutorInfo(kind=engine.Kind.LLAMA, path=sys.argv[2]),))
        spec = engine.ModelSpec(id="gemma", path=sys.argv[1], kind=engine.Kind.LLAMA)
        plan = engine.plan(spec, hw, engine.Constraints(ctx=512)).unwrap()
        print(plan.url, flush=True)
        async with engine.open_instance(plan):
            await trio.sleep_forever()

    trio.run(main)
    """
)


def test_sigkill_of_the_parent_mid_load_kills_the_executor(
    llama_server: str, real_model: Path
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(real_model), llama_server],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        assert url.startswith("http://"), url
        deadline = time.monotonic() + 60
        while (code := health(url)) != 503:
            assert code != 200, "the model loaded before the drill could catch it loading"
            assert time.monotonic() < deadline, "the executor never started loading"
            time.sleep(0.005)
        executors = _executors_of(child.pid)
        assert executors, "no llama-server under the child"
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        _gone, alive = psutil.wait_procs(executors, timeout=10)
        assert alive == [], f"{[p.pid for p in alive]} outlived their parent"
        assert health(url) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for p in _executors_of(child.pid):
            p.kill()
