"""Launching and stopping: the real llama-server and whisper-server, and fault drills with
the fake executor for what a real one cannot be made to do on cue."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest
import trio
from returns.result import Failure

from exedra_engine import (
    AddressUnavailable,
    Constraints,
    ExitedUnexplained,
    Hardware,
    Instance,
    Kind,
    LaunchPlan,
    LoadStalled,
    ModelNotLoaded,
    ModelSpec,
    ReadyTimeout,
    launch,
    open_instance,
    plan,
    plan_launch,
)
from tests.conftest import FAKE

pytestmark = pytest.mark.executor


def alive(pid: int) -> bool:
    try:
        p = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return False
    return p.status() != psutil.STATUS_ZOMBIE


def http(
    url: str, body: dict[str, Any] | None = None, key: str | None = None, files: bytes | None = None
) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    data = json.dumps(body).encode() if body is not None else None
    if files is not None:
        boundary = "exedra-boundary"
        headers = {"Content-Type": f"multipart/form-data; boundary={boundary}"}
        data = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; '
                f'filename="tone.wav"\r\nContent-Type: audio/wav\r\n\r\n'
            ).encode()
            + files
            + f"\r\n--{boundary}--\r\n".encode()
        )
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data else "GET")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, {}


async def call(*args: Any, **kw: Any) -> tuple[int, dict[str, Any]]:
    return await trio.to_thread.run_sync(lambda: http(*args, **kw))


def llama_plan(hw: Hardware, model: Path, **kw: Any) -> LaunchPlan:
    spec = ModelSpec(id="tiny", path=str(model), kind=Kind.LLAMA)
    return plan(spec, hw, Constraints(**kw)).unwrap()


def fake_plan(hw: Hardware, **kw: Any) -> LaunchPlan:
    spec = ModelSpec(id="fake", path="/nonexistent/fake.gguf", kind=Kind.LLAMA)
    return plan_launch(spec, hw, Constraints(**kw)).unwrap()


# -- the real executors --------------------------------------------------------------------


async def test_llama_answers_with_the_planned_key_only(real_hw: Hardware, tiny_llama: Path) -> None:
    p = llama_plan(real_hw, tiny_llama, api_key="test-key-123")
    assert "test-key-123" not in " ".join(p.args)
    logs = io.BytesIO()
    async with open_instance(p, logs=logs) as inst:
        url, key = inst.endpoint.url, inst.endpoint.api_key
        assert (url, key) == (p.url, "test-key-123")
        cmdline = " ".join(psutil.Process(inst.pid).cmdline())
        assert "test-key-123" not in cmdline
        code, body = await call(url + "/completion", {"prompt": "hello", "n_predict": 8}, key)
        assert code == 200 and body["content"]
        # The planned request reached the model: at most n_predict tokens, each text that
        # encodes (a lone surrogate would mean bytes cut mid-character on the way).
        assert 1 <= body["tokens_predicted"] <= 8
        assert not any("\ud800" <= c <= "\udfff" for c in body["content"])
        code, body = await call(
            url + "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
            key,
        )
        assert code == 200 and body["choices"][0]["message"]["content"]
        assert (await call(url + "/completion", {"prompt": "x", "n_predict": 1}))[0] == 401
        assert (await call(url + "/completion", {"prompt": "x", "n_predict": 1}, "wrong"))[0] == 401
        pid = inst.pid
    assert inst.exit_reason is not None and inst.exit_reason.clean
    assert not alive(pid)
    assert b"listening on" in logs.getvalue()
    assert b"test-key-123" not in logs.getvalue()


async def test_whisper_transcribes(real_hw: Hardware, tiny_whisper: Path, wav: Path) -> None:
    spec = ModelSpec(id="w", path=str(tiny_whisper), kind=Kind.TRANSCRIBE, capabilities=("asr",))
    p = plan(spec, real_hw).unwrap()
    assert p.model is None and p.args[-1] == "--no-gpu"
    async with open_instance(p) as inst:
        code, body = await call(inst.endpoint.url + "/inference", files=wav.read_bytes())
        assert code == 200 and "text" in body
    assert inst.exit_reason is not None and inst.exit_reason.clean


async def test_stray_environment_cannot_move_the_server(
    real_hw: Hardware, tiny_llama: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMA_ARG_PORT", "1")
    monkeypatch.setenv("LLAMA_ARG_HOST", "192.0.2.1")
    monkeypatch.setenv("LLAMA_API_KEY", "stray")
    p = llama_plan(real_hw, tiny_llama)
    async with open_instance(p) as inst:
        assert (await call(inst.endpoint.url + "/health"))[0] == 200
        env = psutil.Process(inst.pid).environ()
        assert "LLAMA_ARG_PORT" not in env and "LLAMA_API_KEY" not in env
        code, _ = await call(inst.endpoint.url + "/completion", {"prompt": "a", "n_predict": 1})
        assert code == 200  # unauthenticated as planned, not with the stray key


async def test_caller_edits_between_plan_and_launch_are_read_back(
    real_hw: Hardware, tiny_llama: Path
) -> None:
    p = llama_plan(real_hw, tiny_llama)
    port = p.port + 7
    edited = msgspec.structs.replace(
        p, args=(*p.args, "--port", str(port)), env=("LLAMA_API_KEY=edited",)
    )
    async with open_instance(edited) as inst:
        assert inst.endpoint.url.endswith(f":{port}") and inst.endpoint.api_key == "edited"
        assert (await call(inst.endpoint.url + "/props", key="edited"))[0] == 200


async def test_scanned_port_taken_before_launch_is_replanned(
    real_hw: Hardware, tiny_llama: Path
) -> None:
    p = llama_plan(real_hw, tiny_llama, port_base=21000)
    thief = socket.socket()
    thief.bind(("127.0.0.1", p.port))
    thief.listen()
    try:
        async with open_instance(p) as inst:
            assert inst.plan.port != p.port and inst.plan.port > p.port
            assert (await call(inst.endpoint.url + "/health"))[0] == 200
    finally:
        thief.close()


async def test_explicit_port_taken_is_never_moved(real_hw: Hardware, tiny_llama: Path) -> None:
    p = llama_plan(real_hw, tiny_llama, port=21100)
    thief = socket.socket()
    thief.bind(("127.0.0.1", 21100))
    thief.listen()
    try:
        async with trio.open_nursery() as n:
            r = await launch(n, p)
        assert isinstance(r, Failure) and isinstance(r.failure(), AddressUnavailable)
        err = r.failure()
        assert "exit 1" in err.cause and "127.0.0.1:21100" in err.cause
        assert any("couldn't bind" in line for line in err.log)
    finally:
        thief.close()


async def test_executor_that_exits_before_ready(real_hw: Hardware, tmp_path: Path) -> None:
    spec = ModelSpec(id="x", path=str(tmp_path / "missing.gguf"), kind=Kind.LLAMA)
    p = plan(spec, real_hw).unwrap()
    t = time.monotonic()
    async with trio.open_nursery() as n:
        r = await launch(n, p)
    assert isinstance(r, Failure) and isinstance(r.failure(), ModelNotLoaded)
    msg = str(r.failure())
    assert "exited before it was ready (exit 1)" in msg and "last log lines" in msg
    assert "missing.gguf" in r.failure().cause
    assert time.monotonic() - t < 5


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow
async def test_200_cycles_leave_nothing_behind(real_hw: Hardware, tiny_llama: Path) -> None:
    p = llama_plan(real_hw, tiny_llama, port_base=22000)
    me = psutil.Process()
    async with open_instance(p):
        pass  # warm up trio's lazily created resources before counting
    fds = _fds()
    for _ in range(200):
        async with open_instance(p) as inst:
            assert inst.exit_reason is None
        assert inst.exit_reason is not None and inst.exit_reason.clean, inst.exit_reason
    assert _fds() == fds
    assert me.children(recursive=True) == []


# -- fault drills with the fake executor ---------------------------------------------------


async def test_never_ready_times_out_and_kills(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "hang")
    t = time.monotonic()
    async with trio.open_nursery() as n:
        r = await launch(n, fake_plan(fake_hw), ready_timeout=0.5)
    assert isinstance(r, Failure) and isinstance(r.failure(), ReadyTimeout)
    assert "did not answer /health" in r.failure().cause
    assert 0.5 <= time.monotonic() - t < 3
    assert psutil.Process().children(recursive=True) == []


async def test_caller_cancelled_mid_start(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "hang")
    with trio.move_on_after(0.5) as scope:
        async with open_instance(fake_plan(fake_hw)):
            pytest.fail("a hanging executor became ready")
    assert scope.cancelled_caught
    assert psutil.Process().children(recursive=True) == []


async def test_cancelled_while_running_stops_the_child(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "ok")
    with trio.move_on_after(1.0):
        async with open_instance(fake_plan(fake_hw)) as inst:
            await trio.sleep_forever()
    assert inst.exit_reason is not None and inst.exit_reason.clean
    assert inst.exit_reason.signal == signal.SIGTERM or inst.exit_reason.returncode == 0


async def test_ignoring_sigterm_is_killed_at_the_deadline(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "ignore-term")
    async with trio.open_nursery() as n:
        inst = (await launch(n, fake_plan(fake_hw))).unwrap()
        t = time.monotonic()
        reason = await inst.stop(timeout=0.4)
        took = time.monotonic() - t
    assert reason.signal == signal.SIGKILL and not reason.clean and reason.requested
    assert 0.4 <= took < 1.5


async def test_stop_is_idempotent_and_safe_after_death(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "ok")
    async with trio.open_nursery() as n:
        inst = (await launch(n, fake_plan(fake_hw))).unwrap()
        os.kill(inst.pid, signal.SIGKILL)
        await inst.wait()
        assert inst.exit_reason is not None and not inst.exit_reason.clean
        assert inst.exit_reason.describe() == "killed by SIGKILL"
        assert (await inst.stop()) is inst.exit_reason
        assert (await inst.stop()) is inst.exit_reason


async def test_dies_mid_start_reports_exit_and_log_tail(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "die")
    monkeypatch.setenv("FAKE_DELAY", "0.2")
    async with trio.open_nursery() as n:
        r = await launch(n, fake_plan(fake_hw))
    assert isinstance(r, Failure)
    err = r.failure()
    assert isinstance(err, ExitedUnexplained) and "(exit 3)" in err.cause
    assert err.log[-1] == "error: cannot load model (fake)"


async def test_stop_kills_the_whole_process_group(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "fork")
    async with open_instance(fake_plan(fake_hw)) as inst:
        # The fake forks its helper before it listens, so the helper exists by now; the
        # deadline only covers a slow /proc.
        with trio.fail_after(5):
            while not (kids := psutil.Process(inst.pid).children()):
                await trio.sleep(0.01)
    for k in kids:
        assert not alive(k.pid)


async def test_slow_log_reader_never_blocks_the_executor(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "flood")
    monkeypatch.setenv("FAKE_LINES", "200000")

    class Stalled(trio.abc.SendStream):
        """A consumer that takes a second per write."""

        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            await trio.sleep(1)

        async def wait_send_all_might_not_block(self) -> None:
            pass

        async def aclose(self) -> None:
            pass

    t = time.monotonic()
    async with open_instance(fake_plan(fake_hw), logs=Stalled()) as inst:
        took = time.monotonic() - t
    assert took < 10
    assert inst.dropped_log_lines > 0
    assert any(line.startswith("fake executor: listening") for line in inst.log_tail)


async def test_logs_to_a_text_stream(fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_MODE", "ok")
    out = io.StringIO()
    async with open_instance(fake_plan(fake_hw, api_key="k-in-logs"), logs=out):
        pass
    assert "fake executor: listening" in out.getvalue()


@pytest.mark.parametrize(
    ("extra", "shown"),
    [
        ({"extra_env": ("HF_TOKEN=hf-env-in-logs", "DB_PASSWORD=pw-in-logs")}, "HF_TOKEN=<r"),
        # --hf-token travels in HF_TOKEN (never argv), which the executor echoes.
        ({"extra_args": ("--hf-token", "hf-arg-in-logs")}, "HF_TOKEN=<r"),
    ],
)
async def test_every_secret_of_the_plan_is_redacted_in_log_lines(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], shown: str
) -> None:
    # The pump used to get the API keys only: an HF_TOKEN the executor logged was shown.
    monkeypatch.setenv("FAKE_MODE", "ok")
    monkeypatch.setenv("FAKE_ECHO", "HF_TOKEN,LLAMA_API_KEY,DB_PASSWORD")
    out = io.BytesIO()
    p = fake_plan(fake_hw, api_key="k-api-in-logs", **extra)
    async with open_instance(p, logs=out) as inst:
        pass
    text = out.getvalue().decode()
    assert "fake executor: argv" in text and shown in text, text
    for secret in ("k-api-in-logs", "hf-env-in-logs", "pw-in-logs", "hf-arg-in-logs"):
        assert secret not in text
        assert not any(secret in line for line in inst.log_tail)


@pytest.mark.parametrize("via", ["setpriv", "pre-exec hook"])
def test_killed_parent_leaves_no_executor(fake_hw: Hardware, tmp_path: Path, via: str) -> None:
    from exedra_engine._shell.launch.child import setpriv

    assert setpriv() is not None, "setpriv (util-linux) is part of this machine's base system"
    script = tmp_path / "parent.py"
    plan_json = msgspec.json.encode(fake_plan(fake_hw)).decode()
    without = "exedra_engine._shell.launch.child.setpriv = lambda: None" if via != "setpriv" else ""
    script.write_text(f"""
import sys, trio, msgspec
import exedra_engine._shell.launch.child
from exedra_engine import launch, LaunchPlan
{without}
async def main():
    p = msgspec.json.decode({plan_json!r}, type=LaunchPlan)
    async with trio.open_nursery() as n:
        inst = (await launch(n, p)).unwrap()
        print(inst.pid, flush=True)
        await trio.sleep_forever()
trio.run(main)
""")
    parent = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "FAKE_MODE": "ok"},
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert alive(child)
    cmdline = psutil.Process(child).cmdline()
    assert str(FAKE) in cmdline and not any("setpriv" in a for a in cmdline)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 1.0
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not alive(child)


async def test_missing_executor_binary_is_a_launch_error(tmp_path: Path) -> None:
    from exedra_engine import CPU, ExecutorInfo, LaunchError

    hw = Hardware(
        cpu=CPU(threads=1),
        executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(tmp_path / "gone" / "llama-server")),),
    )
    async with trio.open_nursery() as n:
        r = await launch(n, fake_plan(hw))
    assert isinstance(r, Failure) and isinstance(r.failure(), LaunchError)
    assert str(tmp_path / "gone" / "llama-server") in str(r.failure())


async def test_silent_load_fails_as_stalled(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "hang")  # two lines, then silence
    t = time.monotonic()
    async with trio.open_nursery() as n:
        r = await launch(n, fake_plan(fake_hw), stall_timeout=0.5)
    took = time.monotonic() - t
    assert isinstance(r, Failure) and isinstance(r.failure(), LoadStalled)
    assert "wrote nothing for 0.5 s" in r.failure().cause
    assert r.failure().log[0].startswith("fake executor: mode hang")
    assert 0.5 <= took < 3
    assert psutil.Process().children(recursive=True) == []


async def test_concurrent_stops_send_one_sigterm(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every adapter signals the executor's tree through the shared InstanceState.
    from exedra_engine._shell.launch.tree import LocalTree

    sent: list[str] = []
    real = LocalTree.signal

    def record(self: LocalTree, name: str) -> None:
        sent.append(name)
        real(self, name)

    monkeypatch.setattr(LocalTree, "signal", record)
    monkeypatch.setenv("FAKE_MODE", "ignore-term")
    async with trio.open_nursery() as n:
        inst = (await launch(n, fake_plan(fake_hw))).unwrap()
        async with trio.open_nursery() as stops:
            stops.start_soon(inst.stop, 0.3)
            stops.start_soon(inst.stop, 0.3)
    assert sent.count("SIGTERM") == 1, sent
    assert inst.exit_reason is not None and inst.exit_reason.signal == signal.SIGKILL


async def test_deliver_cancel_is_the_callers(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As trio's run_process(deliver_cancel=...): run when the owning nursery is cancelled
    # under a running child, and cancelled itself once the child has exited.
    monkeypatch.setenv("FAKE_MODE", "ok")
    called: list[int] = []

    async def kill_at_once(inst: Instance) -> None:
        called.append(inst.pid)
        inst.send_signal("SIGKILL")
        await trio.sleep_forever()

    with trio.move_on_after(30):
        async with trio.open_nursery() as n:
            inst = (await launch(n, fake_plan(fake_hw), deliver_cancel=kill_at_once)).unwrap()
            n.cancel_scope.cancel()
    assert called == [inst.pid]
    assert inst.exit_reason is not None and inst.exit_reason.signal == signal.SIGKILL
    assert psutil.Process().children(recursive=True) == []


async def test_a_lost_scanned_port_is_replanned_on_the_executors_word(
    real_hw: Hardware, tiny_llama: Path
) -> None:
    # The port holder may have let go by the time the ports are read: the executor's own
    # "couldn't bind" (AddressUnavailable) is reason enough to move a scanned port.
    p = llama_plan(real_hw, tiny_llama, port_base=21400)
    with socket.socket() as thief:
        thief.bind(("127.0.0.1", p.port))
        thief.listen()
        async with open_instance(p, ports=lambda kind: frozenset()) as inst:
            assert inst.plan.port == p.port + 1
