"""Fault drills with the real llama-server and the real Gemma model (issue 21 items 4-5):
each failure reaches the caller as its own class, with its cause, soon after the exit, and
leaves no process, zombie or descriptor behind. Also the draining stop and the plan read
back against what the executor really did (issue 19 item 6)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest
import trio
from returns.result import Failure

from exedra_engine import (
    AddressUnavailable,
    ArgumentRefused,
    Config,
    Constraints,
    Hardware,
    KilledBySignal,
    Kind,
    LaunchPlan,
    ModelNotLoaded,
    ModelSpec,
    NotGGUF,
    NotReady,
    OutOfMemory,
    Override,
    explain_launch,
    launch,
    open_instance,
    plan,
)
from exedra_engine._shell import notice
from exedra_engine.testing import free_port

pytestmark = pytest.mark.executor

KV_BYTES_PER_TOKEN = 3072
"""Gemma 3 270M's KV cache per token at f16 (measured: 30,720,393,216 bytes at 10,000,128)."""


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def leaves_nothing() -> Iterator[None]:
    """After the drill: no child process (zombie or not) and no descriptor more than before."""
    fds = _fds()
    yield
    me = psutil.Process()
    assert me.children(recursive=True) == []
    assert _fds() <= fds, "descriptors leaked"


def gemma(hw: Hardware, model: Path, *extra: str, **kw: Any) -> LaunchPlan:
    spec = ModelSpec(id="gemma", path=str(model), kind=Kind.LLAMA)
    return plan(spec, hw, Constraints(extra_args=("-c", "512", *extra), **kw)).unwrap()


async def _fails(p: LaunchPlan, **kw: Any) -> tuple[NotReady, float]:
    """The launch's failure and the seconds from the executor's exit to the caller (the exit
    is taken as the last log line's arrival, an upper bound on the diagnosis time)."""
    seen = _Clock()
    async with trio.open_nursery() as n:
        r = await launch(n, p, seen, **kw)
    took = time.monotonic() - seen.last
    assert isinstance(r, Failure), "the launch succeeded"
    err = r.failure()
    assert isinstance(err, NotReady), err
    return err, took


class _Clock:
    """A binary log sink that remembers when the last line came."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def write(self, data: bytes) -> int:
        self.last = time.monotonic()
        return len(data)

    def flush(self) -> None:
        pass


async def test_refused_flag(real_hw: Hardware, real_model: Path, leaves_nothing: None) -> None:
    spec = ModelSpec(id="gemma", path=str(real_model), kind=Kind.LLAMA)
    e = explain_launch(spec, real_hw, Constraints(extra_args=("-c", "512", "--ctx-szie", "64")))
    err, took = await _fails(e.unwrap().plan, sources=e.unwrap().sources)
    assert isinstance(err, ArgumentRefused)
    assert err.flag == "--ctx-szie" and err.suggestion == "--ctx-size"
    assert (
        "refused the argument --ctx-szie" in err.cause and "did you mean --ctx-size?" in err.cause
    )
    assert err.layer == "caller" and "set by caller" in err.cause
    assert took < 2


async def test_refused_flag_drill_names_its_layer_by_key(
    real_hw: Hardware, real_model: Path, leaves_nothing: None
) -> None:
    # The config layer writes the flag inline; the executor names it by its short spelling
    # or its long one: the plan's provenance finds the layer by the flag's key.
    spec = ModelSpec(id="gemma", path=str(real_model), kind=Kind.LLAMA)
    con = Constraints(
        extra_args=("-c", "512"),
        overrides=Config(models={"gemma": Override(args=("--threads-http=many",))}),
    )
    e = explain_launch(spec, real_hw, con).unwrap()
    err, _ = await _fails(e.plan, sources=e.sources)
    assert isinstance(err, ArgumentRefused), err
    assert err.flag == "--threads-http", err.cause
    assert err.layer == "config models.gemma" and "set by config models.gemma" in err.cause


async def test_out_of_memory(real_hw: Hardware, real_model: Path, leaves_nothing: None) -> None:
    # A KV cache half again as large as the host's memory, with the fitter off: the
    # allocation fails at once instead of being fitted (or the host swapping).
    # A KV cache half again as large as the host's memory, with the fitter off: the
    # allocation fails at once instead of being fitted (or the host swapping). The planner
    # refuses such a context, so it is the caller's edit between plan and launch.
    ctx = int(psutil.virtual_memory().total * 1.5 / KV_BYTES_PER_TOKEN)
    planned = gemma(real_hw, real_model)
    args = (*planned.args, "--fit", "off", "-c", str(ctx), "-np", "1")
    p = msgspec.structs.replace(planned, args=args)
    err, took = await _fails(p)
    assert isinstance(err, OutOfMemory), err
    assert err.what == "kv cache" and err.mib is not None
    assert err.mib * 1024 * 1024 > psutil.virtual_memory().total
    assert f"{err.mib:,.0f} MiB for the kv cache" in err.cause
    assert took < 2


async def test_port_taken_between_plan_and_launch(
    real_hw: Hardware, real_model: Path, leaves_nothing: None
) -> None:
    port = free_port()
    p = gemma(real_hw, real_model, port=port)
    with socket.socket() as thief:
        thief.bind(("127.0.0.1", port))
        thief.listen()
        err, took = await _fails(p)
    assert isinstance(err, AddressUnavailable)
    assert f"could not bind 127.0.0.1:{port}" in err.cause
    assert took < 2


async def test_model_truncated_mid_tensor(
    real_hw: Hardware, real_model: Path, tmp_path: Path, leaves_nothing: None
) -> None:
    # A file truncated before planning is refused by the plan itself (its header names
    # tensors past its end); one truncated between plan and launch is the executor's to find.
    cut = tmp_path / "truncated.gguf"
    with real_model.open("rb") as src, cut.open("wb") as dst:
        dst.write(src.read(real_model.stat().st_size // 2))
    refused = plan(ModelSpec(id="gemma", path=str(cut), kind=Kind.LLAMA), real_hw)
    assert isinstance(refused.failure(), NotGGUF)
    assert "lies past the file's end" in str(refused.failure())
    shutil.copyfile(real_model, cut)
    planned = gemma(real_hw, cut)
    os.truncate(cut, real_model.stat().st_size // 2)
    err, took = await _fails(planned)
    assert isinstance(err, ModelNotLoaded)
    assert "the model could not be loaded" in err.cause
    assert "not within the file bounds" in err.cause
    assert took < 2


async def test_killed_by_a_signal_mid_load(
    real_hw: Hardware, real_model: Path, leaves_nothing: None
) -> None:
    p = gemma(real_hw, real_model)

    class KillOnFirstLine:
        """Kills the executor as soon as it has written its first line: mid-load."""

        def __init__(self) -> None:
            self.killed = False

        def write(self, data: bytes) -> int:
            if not self.killed:
                for child in psutil.Process().children():
                    child.send_signal(signal.SIGKILL)
                    self.killed = True
            return len(data)

        def flush(self) -> None:
            pass

    sink = KillOnFirstLine()
    async with trio.open_nursery() as n:
        r = await launch(n, p, sink)
    assert sink.killed
    assert isinstance(r, Failure) and isinstance(r.failure(), KilledBySignal)
    err = r.failure()
    assert err.signal == signal.SIGKILL and err.returncode == -signal.SIGKILL
    assert "killed by SIGKILL" in err.cause


async def test_caller_cancelled_mid_load(
    real_hw: Hardware, real_model: Path, leaves_nothing: None
) -> None:
    p = gemma(real_hw, real_model)
    loading = trio.Event()

    class Seen(trio.abc.SendStream):
        """A log stream that says when the executor has begun loading."""

        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            loading.set()

        async def wait_send_all_might_not_block(self) -> None:
            pass

        async def aclose(self) -> None:
            pass

    async with trio.open_nursery() as n:

        async def cancel_when_loading() -> None:
            await loading.wait()
            n.cancel_scope.cancel()

        n.start_soon(cancel_when_loading)
        async with open_instance(p, Seen()):
            pytest.fail("the model loaded before the cancellation")
    assert n.cancel_scope.cancelled_caught


@pytest.mark.slow  # 20 loads of the real model: ~3 min on a busy 2-core machine
async def test_20_stop_start_cycles_on_one_port(real_hw: Hardware, real_model: Path) -> None:
    # A port of the kernel's choosing: a fixed one keeps the last run's TIME_WAIT sockets for
    # a minute, which the planner counts as in use for an explicitly requested port.
    port = free_port()
    p = gemma(real_hw, real_model, port=port)
    async with open_instance(p):
        pass  # warm up trio's lazily created resources before counting
    fds = _fds()
    for _ in range(20):
        async with open_instance(p) as inst:
            assert inst.endpoint.url.endswith(f":{port}")
        assert inst.exit_reason is not None and inst.exit_reason.clean, inst.exit_reason
        # Exactly one SIGTERM: llama-server exits 1 at once on a second one.
        assert inst.exit_reason.returncode in (0, -signal.SIGTERM)
    assert _fds() == fds
    assert psutil.Process().children(recursive=True) == []


def _complete(url: str, out: dict[str, Any]) -> None:
    body = json.dumps({"prompt": "Count to fifty:", "n_predict": 16}).encode()
    req = urllib.request.Request(url + "/completion", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        out["status"] = r.status
        out["body"] = json.loads(r.read())


@pytest.fixture
def notices(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the shells say through `notice` (the command line prints it as ``note:``)."""
    heard: list[str] = []
    monkeypatch.setattr(notice, "hook", heard.append)
    return heard


async def test_draining_stop_lets_the_answer_finish(
    real_hw: Hardware, real_model: Path, leaves_nothing: None, notices: list[str]
) -> None:
    p = gemma(real_hw, real_model)
    out: dict[str, Any] = {}
    async with open_instance(p) as inst:
        worker = threading.Thread(target=_complete, args=(inst.endpoint.url, out))
        worker.start()
        with trio.fail_after(10):  # until the request is being worked on
            while not (await trio.to_thread.run_sync(_busy, inst.endpoint.url)):
                await trio.sleep(0.01)
        reason = await inst.stop(drain=60)
        await trio.to_thread.run_sync(worker.join)
    assert reason.clean and reason.returncode in (0, -signal.SIGTERM)
    assert out["status"] == 200 and out["body"]["tokens_predicted"] >= 1
    assert out["body"]["stop_type"] in ("limit", "eos", "word")
    # The drain is not silent: how many slots were busy, and how long it waited.
    assert notices[0] == "draining: 1 slot busy; waiting up to 60 s", notices
    assert re.fullmatch(
        r"drained: idle after \d+\.\d s \(1 slot busy when it began\): stopping it", notices[1]
    ), notices
    assert len(notices) == 2


async def test_draining_stop_of_an_idle_executor_says_so(
    real_hw: Hardware, real_model: Path, leaves_nothing: None, notices: list[str]
) -> None:
    async with open_instance(gemma(real_hw, real_model)) as inst:
        reason = await inst.stop(drain=5)
    assert reason.clean
    assert notices == ["drain: no request in progress: stopping it now"]


def _busy(url: str) -> bool:
    with urllib.request.urlopen(url + "/slots", timeout=5) as r:
        return any(s["is_processing"] for s in json.loads(r.read()))


async def test_actual_context_and_peak_memory(
    real_hw: Hardware, real_model: Path, leaves_nothing: None
) -> None:
    p = gemma(real_hw, real_model)
    async with open_instance(p) as inst:
        actual = inst.actual
    assert actual is not None
    assert (
        actual.ctx == 512 and actual.planned_ctx in (512, None)
    ) or actual.ctx == actual.planned_ctx
    assert actual.peak_rss is not None and actual.peak_rss > 100 * 1024 * 1024
