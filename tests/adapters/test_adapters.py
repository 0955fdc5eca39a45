"""What only the asyncio and blocking adapters have to show (issue 23 items 2 and 3): asyncio's
own cancellation forms and loop shutdown, no trio underneath, Ctrl-C inside a blocking
block, and the blocking adapter called from a thread of an asyncio application. What every
adapter must do is tests/adapters/test_conformance.py's."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

import exedra_engine as engine
from exedra_engine import aio
from exedra_engine.testing import free_port
from tests.conftest import FAKE

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def plan(monkeypatch: pytest.MonkeyPatch) -> Iterator[engine.LaunchPlan]:
    """A plan for the fake executor (FAKE_MODE set by each test), with an API key."""
    monkeypatch.setenv("FAKE_MODE", "ok")
    hw = engine.Hardware(
        cpu=engine.CPU(threads=1),
        executors=(engine.ExecutorInfo(kind=engine.Kind.LLAMA, path=str(FAKE)),),
    )
    spec = engine.ModelSpec(id="fake", path="/nonexistent/fake.gguf", kind=engine.Kind.LLAMA)
    yield engine.plan_launch(
        spec, hw, engine.Constraints(api_key="k-adapters", port=free_port())
    ).unwrap()
    assert psutil.Process().children(recursive=True) == []


def _interrupt_after(seconds: float) -> threading.Timer:
    """Ctrl-C, as the terminal sends it: SIGINT, handled in the main thread."""
    main = threading.main_thread().ident or 0
    timer = threading.Timer(seconds, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    return timer


# -- asyncio -----------------------------------------------------------------------------------


def test_asyncio_timeout_mid_start_kills_the_executor(
    plan: engine.LaunchPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "hang")

    async def main() -> None:
        async with asyncio.timeout(0.5), aio.open_instance(plan):
            pytest.fail("a hanging executor became ready")

    t = time.monotonic()
    with pytest.raises(TimeoutError):  # asyncio.timeout's own, not a CancelledError
        asyncio.run(main())
    assert time.monotonic() - t < 3


def test_asyncio_timeout_while_running_stops_gracefully(
    plan: engine.LaunchPlan,
) -> None:
    async def main() -> aio.Instance:
        async with aio.open_instance(plan) as inst:
            try:
                async with asyncio.timeout(0.3):
                    await asyncio.Event().wait()
            except TimeoutError:
                return inst
        raise AssertionError("unreachable")

    inst = asyncio.run(main())
    assert inst.exit_reason is not None and inst.exit_reason.clean, inst.exit_reason
    assert inst.exit_reason.requested


def test_a_stop_completes_under_a_cancelled_caller(plan: engine.LaunchPlan) -> None:
    # The caller is cancelled again and again while it stops: the stop still ends with the
    # group gone, and the cancellation is raised after.
    async def main() -> aio.Instance:
        inst = (await aio.launch(plan)).unwrap()
        stopping = asyncio.ensure_future(inst.stop(timeout=5))
        for _ in range(3):
            await asyncio.sleep(0)
            stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        assert inst.exit_reason is not None and not _alive(inst.pid)
        return inst

    inst = asyncio.run(main())
    assert inst.exit_reason is not None and inst.exit_reason.requested


def test_loop_shutdown_stops_a_launched_instance(plan: engine.LaunchPlan) -> None:
    # launch() without a stop: the end of asyncio.run cancels the supervising task, which
    # stops the executor before the loop closes.
    async def main() -> aio.Instance:
        return (await aio.launch(plan)).unwrap()

    inst = asyncio.run(main())
    assert inst.exit_reason is not None and inst.exit_reason.clean, inst.exit_reason
    assert not _alive(inst.pid)


def test_log_lines_reach_the_sink_redacted(
    plan: engine.LaunchPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_ECHO", "LLAMA_API_KEY")
    out = io.StringIO()

    async def main() -> aio.Instance:
        async with aio.open_instance(plan, logs=out) as inst:
            return inst

    inst = asyncio.run(main())
    text = out.getvalue()
    assert "fake executor: listening" in text and "LLAMA_API_KEY=<redacted>" in text
    assert "k-adapters" not in text and not any("k-adapters" in ln for ln in inst.log_tail)


def test_the_asyncio_adapter_runs_without_trio(plan: engine.LaunchPlan) -> None:
    import msgspec

    script = textwrap.dedent("""
        import asyncio, sys, msgspec
        import exedra_engine as engine
        from exedra_engine import aio
        async def main():
            plan = msgspec.json.decode(sys.argv[1], type=engine.LaunchPlan)
            async with aio.open_instance(plan) as inst:
                pass
            print(inst.exit_reason.clean, "trio" in sys.modules)
        asyncio.run(main())
    """)
    out = subprocess.run(
        [sys.executable, "-c", script, msgspec.json.encode(plan).decode()],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert out.stdout.split() == ["True", "False"], out.stderr


# -- blocking ----------------------------------------------------------------------------------


def test_ctrl_c_inside_the_block_stops_the_executor(plan: engine.LaunchPlan) -> None:
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt), engine.run(plan) as inst:
        timer = _interrupt_after(0.1)
        time.sleep(30)
    timer.join()
    assert inst.exit_reason is not None and inst.exit_reason.clean and inst.exit_reason.requested
    assert not _alive(inst.pid)
    assert signal.getsignal(signal.SIGINT) is before  # no handler of ours, before or after


def test_a_second_ctrl_c_kills_at_once(
    plan: engine.LaunchPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "ignore-term")
    with pytest.raises(KeyboardInterrupt), engine.run(plan, stop_timeout=30) as inst:
        t = time.monotonic()
        first = _interrupt_after(0.1)
        second = _interrupt_after(0.6)
        time.sleep(30)
    took = time.monotonic() - t
    first.join()
    second.join()
    assert inst.exit_reason is not None and inst.exit_reason.signal == signal.SIGKILL
    assert took < 5
    assert not _alive(inst.pid)


def test_blocking_run_from_a_thread_of_an_asyncio_app(plan: engine.LaunchPlan) -> None:
    def serve() -> tuple[int, engine.ExitReason | None, int]:
        with engine.run(plan) as inst:
            req = urllib.request.Request(
                inst.endpoint.url + "/health", headers={"Authorization": "Bearer k-adapters"}
            )
            with urllib.request.urlopen(req, timeout=10) as r:
                code = r.status
            reason = inst.stop()
        return code, reason, inst.pid

    async def app() -> tuple[int, engine.ExitReason | None, int]:
        # The application's loop keeps running meanwhile.
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        result = await asyncio.to_thread(serve)
        ticker.cancel()
        assert ticks > 0
        return result

    code, reason, pid = asyncio.run(app())
    assert code == 200
    assert reason is not None and reason.clean and not _alive(pid)


def test_a_failed_start_raises_and_leaves_no_thread(
    plan: engine.LaunchPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "die")
    threads = {t.name for t in threading.enumerate()}
    with pytest.raises(engine.NotReady, match=r"\(exit 3\)"), engine.run(plan):
        pytest.fail("a dying executor became ready")
    assert {t.name for t in threading.enumerate()} <= threads | {"exedra-engine-spawner"}
    assert "exedra-engine-run" not in {t.name for t in threading.enumerate()}


def test_run_needs_no_loop_and_reports_the_instance(plan: engine.LaunchPlan) -> None:
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()  # a plain script: no loop anywhere
    with engine.run(plan) as inst:
        assert inst.endpoint.api_key == "k-adapters" and _alive(inst.pid)
        assert inst.plan is plan and inst.exit_reason is None
        assert not inst.wait(timeout=0.05)
    assert inst.wait() and inst.exit_reason is not None and inst.stop() is inst.exit_reason
    assert os.getpgid(os.getpid()) != inst.pid


def test_a_slow_log_sink_never_blocks_the_executor(
    plan: engine.LaunchPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "flood")
    monkeypatch.setenv("FAKE_LINES", "200000")

    class Stalled(io.BytesIO):
        """A consumer that takes a second per write."""

        def write(self, data: Any) -> int:
            time.sleep(1)
            return len(data)

    async def main() -> aio.Instance:
        async with aio.open_instance(plan, logs=Stalled()) as inst:
            return inst

    t = time.monotonic()
    inst = asyncio.run(main())
    assert time.monotonic() - t < 10
    assert inst.dropped_log_lines > 0
    assert any(line.startswith("fake executor: listening") for line in inst.log_tail)
