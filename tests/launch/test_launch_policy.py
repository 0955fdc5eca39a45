"""The launch policies every adapter runs, as data: no process, no socket, no clock."""

from __future__ import annotations

import math

import msgspec

from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._core.launch.actual import actual, planned_ctx
from exedra_engine._core.launch.budget import (
    STALL,
    START_UNKNOWN,
    load_budget,
    load_limits,
    plan_bytes,
)
from exedra_engine._core.launch.child import child_spec
from exedra_engine._core.launch.logs import MAX_LINE, LogLines
from exedra_engine._core.launch.readiness import (
    POLL_FIRST,
    POLL_MAX,
    LoadLimits,
    answered_by_executor,
    next_interval,
    proc_state,
)
from exedra_engine._core.launch.stop import (
    KILL,
    TERM,
    Send,
    Wait,
    settle_left,
    should_send,
    stop_steps,
)
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.values import ModelFile, ModelSpec


def test_stop_is_one_sigterm_then_sigkill_at_the_deadline() -> None:
    assert stop_steps(10) == (
        Send(signal=TERM),
        Wait(seconds=10),
        Send(signal=KILL),
        Wait(seconds=math.inf),
    )


def test_a_sigterm_already_sent_is_never_repeated() -> None:
    steps = stop_steps(5, sent=frozenset({TERM}), kill_wait=1)
    assert Send(signal=TERM) not in steps
    assert steps == (Wait(seconds=5), Send(signal=KILL), Wait(seconds=1))
    assert not should_send(TERM, frozenset({TERM}))
    assert should_send(KILL, frozenset({TERM, KILL}))


def test_no_grace_kills_at_once() -> None:
    assert stop_steps(0)[0] == Send(signal=KILL)


def test_a_stop_right_after_readiness_waits_out_the_settle_window() -> None:
    assert settle_left(None, 5.0) == 0.0
    assert 0 < settle_left(5.0, 5.01) <= 0.05
    assert settle_left(5.0, 6.0) == 0.0


def test_log_lines_split_across_chunks_and_redact() -> None:
    lines = LogLines(("sk-secret-123",), tail=2)
    assert lines.feed(b"one\ntw") == [b"one\n"]
    assert lines.feed(b"o key=sk-secret-123\nthr") == [b"two key=<redacted>\n"]
    assert lines.end() == [b"thr\n"]
    assert list(lines.tail) == ["two key=<redacted>", "thr"]
    assert lines.count == 3


def test_a_line_without_end_is_cut_at_the_cap() -> None:
    lines = LogLines(())
    out = lines.feed(b"x" * (MAX_LINE + 10))
    assert len(out) == 1 and len(out[0]) == MAX_LINE + 11


def test_poll_interval_grows_to_its_cap() -> None:
    interval, seen = POLL_FIRST, []
    for _ in range(50):
        interval = next_interval(interval)
        seen.append(interval)
    assert seen == sorted(seen) and seen[-1] == POLL_MAX


def test_load_limits_budget_and_stall() -> None:
    limits = LoadLimits(budget=100, stall=10)
    assert limits.overdue(started=0, last_output=0, now=5) is None
    assert limits.overdue(started=0, last_output=0, now=10) == "stalled"
    assert limits.overdue(started=0, last_output=95, now=100) == "timeout"
    assert limits.left(started=0, last_output=3, now=5) == 8
    assert LoadLimits().overdue(0, 0, 1e9) is None


def test_a_200_from_a_stranger_on_the_port_is_not_readiness() -> None:
    assert answered_by_executor(frozenset({7}), frozenset({7, 8}), "S")
    assert not answered_by_executor(frozenset({7}), frozenset({9}), "S")
    assert answered_by_executor(None, None, "")  # the kernel cannot tell: trust the 200
    assert answered_by_executor(frozenset({7}), None, "S")  # descriptors hidden, alive
    assert not answered_by_executor(frozenset({7}), None, "Z")
    assert proc_state("123 (llama server) S 1 2") == "S"
    assert proc_state("") == ""


def test_child_spec_takes_plain_values_and_drops_stray_executor_variables() -> None:
    spec = ModelSpec(id="m", path="/m.gguf", kind="llama")
    plan = LaunchPlan(
        spec=spec,
        command="/bin/llama-server",
        args=("--port", "8080"),
        env=("LLAMA_API_KEY=k",),
        host="127.0.0.1",
        port=8080,
        ready="/health",
    )
    base = {"PATH": "/bin", "LLAMA_ARG_PORT": "1", "LLAMA_API_KEY": "stray"}
    child = child_spec(plan, base)
    assert child.argv == ("/bin/llama-server", "--port", "8080")
    assert dict(child.env) == {"PATH": "/bin", "LLAMA_API_KEY": "k"}
    assert child.new_session and child.death_signal == "SIGKILL"


def test_the_budget_comes_from_the_bytes_to_read() -> None:
    spec = ModelSpec(id="m", path="/m-00001-of-00002.gguf", kind="llama")
    args = ("--model", spec.path, "--mmproj", "/mmproj.gguf")
    base = LaunchPlan(spec=spec, command="x", args=args, host="127.0.0.1", port=1, ready="/health")
    assert [f.path for f in base.files] == [spec.path, "/m-00002-of-00002.gguf", "/mmproj.gguf"]
    assert load_limits(base).budget == START_UNKNOWN  # the files' sizes are not known
    gib = 1 << 30
    files = (
        ModelFile(path=spec.path, size=20 * gib),
        ModelFile(path="/m-00002-of-00002.gguf", size=20 * gib, role="shard"),
        ModelFile(path="/mmproj.gguf", size=gib, role="mmproj"),
    )
    split = msgspec.structs.replace(base, files=files)
    assert plan_bytes(split) == 41 * gib
    assert load_limits(split).budget == load_budget(41 * gib) > load_budget(20 * gib)
    assert load_limits(split, ready_timeout=5).budget == 5
    assert load_limits(split).stall == STALL


def test_a_context_changed_by_the_fitter_is_a_warning() -> None:
    spec = ModelSpec(id="m", path="/m.gguf", kind="llama")
    p = LaunchPlan(
        spec=spec,
        command="x",
        args=("--ctx-size", "8192"),
        host="127.0.0.1",
        port=1,
        ready="/health",
    )
    assert planned_ctx(p, LLAMA) == 8192
    same = actual(p, LLAMA, ctx=8192, peak_rss=1 << 30)
    assert same.warnings == () and same.peak_rss == 1 << 30
    fitted = actual(p, LLAMA, ctx=4096, peak_rss=None)
    assert len(fitted.warnings) == 1
    assert "context 4096 where the plan asked for 8192" in fitted.warnings[0]
    unset = msgspec.structs.replace(p, args=(), env=("LLAMA_ARG_CTX_SIZE=2048",))
    assert planned_ctx(unset, LLAMA) == 2048
    assert planned_ctx(msgspec.structs.replace(p, args=()), LLAMA) is None
