"""Readiness on bytes (no socket), and the launcher's use of it against the fake executor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from exedra_engine import Constraints, Hardware, Kind, ModelSpec, NotReady, launch, open_instance
from exedra_engine._core.executors.builtin import executor_profile
from exedra_engine._core.host.netstat import ports_in_use
from exedra_engine._core.launch import readiness
from exedra_engine._core.plan.planner import plan_launch
from exedra_engine.testing import write_tiny_llama

# -- the request and the parser ------------------------------------------------------------


def test_request_keeps_the_connection_and_brackets_ipv6() -> None:
    req = readiness.request("::1", 18080, "/health")
    assert req.startswith(b"GET /health HTTP/1.1\r\n")
    assert b"\r\nHost: [::1]:18080\r\n" in req
    assert b"\r\nConnection: keep-alive\r\n" in req
    assert req.endswith(b"\r\n\r\n")
    assert b"Host: 127.0.0.1:8080\r\n" in readiness.request("127.0.0.1", 8080, "/health")


OK = (
    b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\nContent-Type: application/json\r\n\r\n"
    b'{"status":"ok"}'
)
LOADING = b'HTTP/1.1 503 Service Unavailable\r\nContent-Length: 25\r\n\r\n{"error":"Loading model"}'


def test_parse_waits_for_the_whole_body() -> None:
    for cut in range(len(OK)):
        assert readiness.parse(OK[:cut]) is None
    a = readiness.parse(OK)
    assert a == readiness.Answer(
        status=200, consumed=len(OK), keep_alive=True, body_start=OK.index(b"{")
    )
    assert readiness.json_body(OK, a) == {"status": "ok"}


def test_parse_reads_pipelined_answers_one_at_a_time() -> None:
    buf = LOADING + OK
    first = readiness.parse(buf)
    assert first is not None and first.status == 503 and first.keep_alive
    second = readiness.parse(buf[first.consumed :])
    assert second is not None and second.status == 200
    assert first.consumed + second.consumed == len(buf)


@pytest.mark.parametrize(
    ("head", "keep"),
    [
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", True),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", False),
        (b"HTTP/1.1 200 OK\r\n\r\nbody to the end", False),
    ],
)
def test_parse_knows_when_the_connection_ends(head: bytes, keep: bool) -> None:
    a = readiness.parse(head)
    assert a is not None and a.status == 200 and a.keep_alive is keep


@pytest.mark.parametrize(
    "junk",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200\r\nContent-Length: x\r\n\r\n",
    ],
)
def test_parse_refuses_what_is_not_http(junk: bytes) -> None:
    with pytest.raises(readiness.Malformed):
        readiness.parse(junk)


def test_parse_bounds_the_head() -> None:
    with pytest.raises(readiness.Malformed):
        readiness.parse(b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 5000)


# -- TIME_WAIT is a fact about each executor ------------------------------------------------

TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  inode
   0: 0100007F:46A0 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1
   1: 0100007F:46A1 0100007F:9C40 06 00000000:00000000 03:00000F00 00000000     0        0 0 3
"""


def test_time_wait_counts_only_for_executors_it_blocks() -> None:
    assert ports_in_use(TCP) == {0x46A0}
    assert ports_in_use(TCP, time_wait=True) == {0x46A0, 0x46A1}
    # llama-server binds with SO_REUSEADDR; whisper-server does not (checked with the binaries).
    assert not executor_profile(Kind.LLAMA).time_wait_blocks_bind
    assert executor_profile(Kind.TRANSCRIBE).time_wait_blocks_bind


# -- the launcher on the fake executor ------------------------------------------------------


def _plan(hw: Hardware, **kw: Any) -> Any:
    spec = ModelSpec(id="fake", path="/nonexistent/fake.gguf", kind=Kind.LLAMA)
    return plan_launch(spec, hw, Constraints(**kw)).unwrap()


async def test_a_long_load_is_polled_on_one_connection(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_READY_AFTER", "1.5")
    async with open_instance(_plan(fake_hw)) as inst:
        # ~1.5 s of 503s polled every few ms: one connection, reused (a reconnect per poll
        # would be hundreds).
        assert inst.ready_connections <= 2


async def test_a_server_that_closes_each_answer_is_reconnected(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_READY_AFTER", "0.5")
    monkeypatch.setenv("FAKE_HTTP10", "1")
    async with open_instance(_plan(fake_hw)) as inst:
        assert inst.ready_connections > 2  # it was really polled, and really reconnected


async def test_sigill_says_the_binary_does_not_fit_this_cpu(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_MODE", "sigill")
    with pytest.raises(NotReady) as info:
        async with open_instance(_plan(fake_hw)):
            pass
    msg = str(info.value)
    assert "killed by SIGILL" in msg
    assert "CPU instructions this machine lacks" in msg
    assert "scripts/install-executors.sh" in msg


def test_cli_gives_one_line_not_a_traceback_when_launch_fails(
    fake_hw: Hardware,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    from exedra_engine.cli import main

    fake = fake_hw.executor(Kind.LLAMA)
    assert fake is not None
    monkeypatch.setenv("FAKE_MODE", "sigill")
    model = write_tiny_llama(tmp_path / "m.gguf")  # launch wants the file on this host
    code = main(["launch", "--model", str(model), "--kind", "llama", "--executor", fake.path])
    err = capsys.readouterr().err
    assert code == 1
    assert "Traceback" not in err
    # The executor's own log lines are forwarded first; the failure is one cause line after
    # them, then its last log lines as lines of their own (issue 21 item 2).
    lines = err.splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("exedra-engine: error:")]
    assert len(errors) == 1, err
    assert "killed by SIGILL" in lines[errors[0]]
    after = lines[errors[0] + 1 :]
    assert after[0] == "last log lines of the executor:"
    assert after[1:] and all(line.startswith("  ") for line in after[1:]), err


@pytest.mark.slow
async def test_the_executor_outlives_the_thread_that_started_it(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    # PR_SET_PDEATHSIG follows the forking thread; trio's idle cache threads exit after 10 s,
    # which used to SIGKILL every executor 10 s after its start.
    import trio

    async with open_instance(_plan(fake_hw)) as inst:
        await trio.sleep(11.5)
        assert inst.exit_reason is None
    assert inst.exit_reason is not None and inst.exit_reason.clean


async def test_a_stranger_answering_on_the_port_does_not_make_a_launch_ready(
    fake_hw: Hardware, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process took the planned port between planning and binding, and answers 200:
    # the fake (which binds after 1 s) then fails to bind and exits. The launch must fail
    # with that exit, not report the stranger as the instance.
    import http.server
    import threading

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    stranger = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    port = stranger.server_address[1]
    threading.Thread(target=stranger.serve_forever, daemon=True).start()
    monkeypatch.setenv("FAKE_DELAY", "1")
    try:
        spec = ModelSpec(path="/nonexistent/fake.gguf", kind=Kind.LLAMA)
        plan = plan_launch(spec, fake_hw, Constraints(port=port)).unwrap()  # no ports known
        with trio.fail_after(30):
            async with trio.open_nursery() as n:
                r = await launch(n, plan)
        err = r.failure()
        assert isinstance(err, NotReady) and "exited before it was ready" in str(err), err
    finally:
        stranger.shutdown()
        stranger.server_close()
