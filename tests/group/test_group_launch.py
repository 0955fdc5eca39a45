"""Launching a group, the same on every adapter (trio, asyncio, blocking), in the style of
tests/adapters/test_conformance.py: every member starts at once, all or nothing (a member that fails
stops the others, nothing is left, the error names it), the stops run in parallel within one
deadline, and each member's instance is reached by its id.

The real llama-server serves the happy path (two models); the fake executor
(tests/fake_executor.py) the faults: one member crashes, one hangs, one ignores SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

import psutil
import pytest
import trio

import exedra_engine as engine
from exedra_engine import aio
from exedra_engine._core.group.values import GroupPlan, MemberShare
from exedra_engine.testing import free_port
from tests.adapters.test_conformance import Ended, Running, _AioView, _TrioView, alive
from tests.conftest import FAKE
from tests.http_client import health, http

T = TypeVar("T")
Body = Callable[[Mapping[str, Running]], T]


class GroupAdapter(Protocol):
    name: str

    def session(
        self, group: GroupPlan, body: Body[T], **kw: Any
    ) -> tuple[T, Mapping[str, Ended]]: ...

    def failure(self, group: GroupPlan, **kw: Any) -> engine.EngineError: ...

    def cancel_after(self, group: GroupPlan, seconds: float) -> tuple[bool, bool]:
        """Cancel the start the adapter's way after `seconds`: (whether the block was
        entered, whether the cancellation was seen)."""
        ...


class Trio:
    name = "trio"

    def session(self, group: GroupPlan, body: Body[T], **kw: Any) -> tuple[T, Mapping[str, Ended]]:
        async def main() -> tuple[T, Mapping[str, Ended]]:
            async with engine.open_group(group, **kw) as running:
                token = trio.lowlevel.current_trio_token()
                views = {i: _TrioView(running[i], token) for i in running}
                out = await trio.to_thread.run_sync(body, views)
            return out, running

        return trio.run(main)

    def failure(self, group: GroupPlan, **kw: Any) -> engine.EngineError:
        async def main() -> None:
            async with engine.open_group(group, **kw):
                pass

        with pytest.raises(engine.EngineError) as caught:
            trio.run(main)
        return caught.value

    def cancel_after(self, group: GroupPlan, seconds: float) -> tuple[bool, bool]:
        entered = False

        async def main() -> bool:
            nonlocal entered
            with trio.move_on_after(seconds) as scope:
                async with engine.open_group(group):
                    entered = True
            return scope.cancelled_caught

        return entered, trio.run(main)


class Asyncio:
    name = "asyncio"

    def session(self, group: GroupPlan, body: Body[T], **kw: Any) -> tuple[T, Mapping[str, Ended]]:
        async def main() -> tuple[T, Mapping[str, Ended]]:
            async with aio.open_group(group, **kw) as running:
                loop = asyncio.get_running_loop()
                views = {i: _AioView(running[i], loop) for i in running}
                out = await asyncio.to_thread(body, views)
            return out, running

        return asyncio.run(main())

    def failure(self, group: GroupPlan, **kw: Any) -> engine.EngineError:
        async def main() -> None:
            async with aio.open_group(group, **kw):
                pass

        with pytest.raises(engine.EngineError) as caught:
            asyncio.run(main())
        return caught.value

    def cancel_after(self, group: GroupPlan, seconds: float) -> tuple[bool, bool]:
        entered = False

        async def main() -> bool:
            nonlocal entered
            try:
                async with asyncio.timeout(seconds), aio.open_group(group):
                    entered = True
            except TimeoutError:
                return True
            return False

        return entered, asyncio.run(main())


class Blocking:
    name = "blocking"

    def session(self, group: GroupPlan, body: Body[T], **kw: Any) -> tuple[T, Mapping[str, Ended]]:
        with engine.run_group(group, **kw) as running:
            out = body(running)
        return out, running

    def failure(self, group: GroupPlan, **kw: Any) -> engine.EngineError:
        with pytest.raises(engine.EngineError) as caught, engine.run_group(group, **kw):
            pass
        return caught.value

    def cancel_after(self, group: GroupPlan, seconds: float) -> tuple[bool, bool]:
        # The cancellation is a Ctrl-C: SIGINT to this process, raised in the main thread.
        timer = threading.Timer(
            seconds, signal.pthread_kill, (threading.main_thread().ident or 0, signal.SIGINT)
        )
        entered = False
        timer.start()
        try:
            with engine.run_group(group):
                entered = True
        except KeyboardInterrupt:
            return entered, True
        finally:
            timer.join()
        return entered, False


GROUP_ADAPTERS: list[GroupAdapter] = [Trio(), Asyncio(), Blocking()]


@pytest.fixture(params=GROUP_ADAPTERS, ids=lambda a: a.name)
def adapter(request: pytest.FixtureRequest) -> GroupAdapter:
    return request.param  # type: ignore[no-any-return]


def group_of(*plans: engine.LaunchPlan) -> GroupPlan:
    """A group plan made of single plans (the group planner's output has this shape)."""
    return GroupPlan(
        plans=plans, shares=tuple(MemberShare(id=p.spec.id, port=p.port) for p in plans)
    )


def _no_children() -> None:
    assert psutil.Process().children(recursive=True) == []


@pytest.fixture
def fake() -> Iterator[Callable[..., engine.LaunchPlan]]:
    """A plan for one fake member `name`, whose FAKE_* variables are its own (plan env)."""
    hw = engine.Hardware(
        cpu=engine.CPU(threads=1),
        executors=(engine.ExecutorInfo(kind=engine.Kind.LLAMA, path=str(FAKE)),),
    )

    def make(name: str, mode: str, **env: str) -> engine.LaunchPlan:
        spec = engine.ModelSpec(id=name, path="/nonexistent/fake.gguf", kind=engine.Kind.LLAMA)
        extra = (f"FAKE_MODE={mode}", *(f"{k}={v}" for k, v in env.items()))
        con = engine.Constraints(port=free_port(), extra_env=extra)
        return engine.plan_launch(spec, hw, con).unwrap()

    yield make
    _no_children()


# -- the real executor -------------------------------------------------------------------------


@pytest.mark.executor
@pytest.mark.slow
def test_two_real_members_start_together_answer_by_id_and_stop(
    adapter: GroupAdapter, real_hw: engine.Hardware, real_model: Path, tiny_llama: Path
) -> None:
    def member(name: str, path: Path) -> engine.LaunchPlan:
        spec = engine.ModelSpec(id=name, path=str(path), kind=engine.Kind.LLAMA)
        return engine.plan(spec, real_hw, engine.Constraints(ctx=512, threads=1)).unwrap()

    chat, tiny = member("chat", real_model), member("tiny", tiny_llama)
    tiny = engine.plan(
        tiny.spec, real_hw, engine.Constraints(ctx=512, threads=1, port=chat.port + 1)
    ).unwrap()
    group = group_of(chat, tiny)

    def ask(running: Mapping[str, Running]) -> dict[str, tuple[int, Any]]:
        body = {"prompt": "Hello", "n_predict": 4}
        return {i: http(running[i].endpoint.url + "/completion", body) for i in running}

    answers, ended = adapter.session(group, ask, ready_timeout=120)
    assert list(ended) == ["chat", "tiny"]
    for name, (code, out) in answers.items():
        assert code == 200 and out["tokens_predicted"] >= 1, (name, out)
    for inst in ended.values():
        assert inst.exit_reason is not None and inst.exit_reason.clean
        assert not alive(inst.pid)
    assert health(chat.url) == 0 and health(tiny.url) == 0
    _no_children()


# -- policies, with the fake executor ------------------------------------------------------------


def test_members_are_reached_by_id_in_member_order(
    adapter: GroupAdapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    group = group_of(fake("b", "ok"), fake("a", "ok"))

    def look(running: Mapping[str, Running]) -> tuple[list[str], dict[str, str]]:
        return list(running), {i: running[i].endpoint.url for i in running}

    (ids, urls), ended = adapter.session(group, look)
    assert ids == ["b", "a"]
    assert urls == {"b": group.plan_of("b").url, "a": group.plan_of("a").url}
    assert all(e.exit_reason is not None and e.exit_reason.clean for e in ended.values())


def test_members_start_concurrently(
    adapter: GroupAdapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    # Each member answers 503 for 2 s after it binds: one after the other would take 4 s
    # (the margin is for a loaded host's slow Python starts).
    group = group_of(fake("a", "ok", FAKE_READY_AFTER="2"), fake("b", "ok", FAKE_READY_AFTER="2"))
    t = time.monotonic()
    took, _ = adapter.session(group, lambda running: time.monotonic() - t)
    assert 2.0 <= took < 3.6


def test_a_crashing_member_stops_the_others_and_is_named(
    adapter: GroupAdapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    # "slow" would be ready only after 30 s: the group does not wait for it.
    slow = fake("slow", "ok", FAKE_READY_AFTER="30")
    bad = fake("bad", "die", FAKE_DELAY="0.3")
    t = time.monotonic()
    err = adapter.failure(group_of(slow, bad))
    assert time.monotonic() - t < 5
    assert isinstance(err, engine.MemberFailed) and err.member == "bad", err
    assert isinstance(err.cause, engine.NotReady) and "(exit 3)" in str(err.cause)
    assert err.__cause__ is err.cause and err.kind == err.cause.kind
    assert str(err).startswith("group member 'bad' failed: ")
    assert health(slow.url) == 0
    _no_children()


def test_a_member_that_exits_after_its_readiness_while_another_loads_fails_the_start(
    adapter: GroupAdapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    # "quits" is ready at once and exits (status 3) 1 s later; "slow" is ready only at 5 s.
    # The group is never handed out with a dead member: the start fails when it dies.
    quits = fake("quits", "ok", FAKE_EXIT_AFTER="1")
    slow = fake("slow", "ok", FAKE_READY_AFTER="5")
    t = time.monotonic()
    err = adapter.failure(group_of(quits, slow))
    took = time.monotonic() - t
    assert isinstance(err, engine.MemberFailed) and err.member == "quits", err
    assert isinstance(err.cause, engine.NotReady) and err.cause.returncode == 3
    assert "after it was ready" in str(err) and "(exit 3)" in str(err)
    assert 1 <= took < 4.5, took
    assert health(slow.url) == 0
    _no_children()


def test_a_hanging_member_fails_at_the_ready_timeout_and_stops_the_ready_ones(
    adapter: GroupAdapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    ok, stuck = fake("ok", "ok"), fake("stuck", "hang")
    t = time.monotonic()
    err = adapter.failure(group_of(ok, stuck), ready_timeout=0.8)
    assert 0.8 <= time.monotonic() - t < 4
    assert isinstance(err, engine.MemberFailed) and err.member == "stuck", err
    assert isinstance(err.cause, engine.NotReady) and "did not answer" in str(err.cause)
    assert health(ok.url) == 0
    _no_children()


def test_members_stop_in_parallel_within_one_deadline(
    adapter: GroupAdapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    # Both ignore SIGTERM: each is killed at the 1 s deadline; one after the other would
    # take 2 s.
    group = group_of(fake("a", "ignore-term"), fake("b", "ignore-term"))
    left, ended = adapter.session(group, lambda running: time.monotonic(), stop_timeout=1.0)
    took = time.monotonic() - left
    assert 1.0 <= took < 1.9, took
    for inst in ended.values():
        assert inst.exit_reason is not None and inst.exit_reason.signal == signal.SIGKILL


def test_an_error_in_the_block_stops_every_member_and_is_raised_as_itself(
    adapter: GroupAdapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    group = group_of(fake("a", "ok"), fake("b", "ok"))
    pids: list[int] = []

    def boom(running: Mapping[str, Running]) -> None:
        pids.extend(running[i].pid for i in running)
        raise LookupError("the caller's own")

    with pytest.raises(LookupError, match="the caller's own"):
        adapter.session(group, boom)
    assert len(pids) == 2 and not any(alive(p) for p in pids)


def test_repeated_ids_are_refused_before_anything_starts(
    adapter: GroupAdapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    err = adapter.failure(group_of(fake("a", "ok"), fake("a", "ok")))
    assert isinstance(err, engine.PlanError) and "a repeated" in str(err)


def test_a_cancelled_start_stops_every_member(
    adapter: GroupAdapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    ok, stuck = fake("ok", "ok"), fake("stuck", "hang")
    entered, cancelled = adapter.cancel_after(group_of(ok, stuck), 0.5)
    assert cancelled and not entered
    assert health(ok.url) == 0


def _enter_trio(group: GroupPlan) -> None:
    async def main() -> None:
        async with engine.open_group(group):
            pass

    trio.run(main)


def _enter_asyncio(group: GroupPlan) -> None:
    async def main() -> None:
        async with aio.open_group(group):
            pass

    asyncio.run(main())


def _enter_blocking(group: GroupPlan) -> None:
    with engine.run_group(group):
        pass


@pytest.mark.parametrize(
    "enter", [_enter_trio, _enter_asyncio, _enter_blocking], ids=lambda f: f.__name__[7:]
)
def test_ctrl_c_during_a_groups_load_is_a_plain_keyboard_interrupt(
    enter: Callable[[GroupPlan], None], fake: Callable[..., engine.LaunchPlan]
) -> None:
    assert threading.current_thread() is threading.main_thread()
    group = group_of(fake("a", "hang"), fake("b", "hang"))
    main = threading.main_thread().ident or 0
    timer = threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(BaseException) as caught:  # its exact type is the point
            enter(group)
    finally:
        timer.cancel()
    assert type(caught.value) is KeyboardInterrupt, repr(caught.value)


@pytest.mark.executor
@pytest.mark.slow
def test_a_planned_group_of_two_llama_servers_and_a_whisper_server_answers_and_stops(
    real_hw: engine.Hardware, real_model: Path, tiny_llama: Path, tiny_whisper: Path, wav: Path
) -> None:
    # The judgement: planned by the group planner, launched, every member answers,
    # and nothing is left once the block ends.
    def member(name: str, path: Path, kind: engine.Kind, **c: Any) -> engine.GroupMember:
        spec = engine.ModelSpec(id=name, path=str(path), kind=kind)
        return engine.GroupMember(spec=spec, constraints=engine.Constraints(**c))

    members = (
        member("chat", real_model, engine.Kind.LLAMA, ctx=512),
        member("small", tiny_llama, engine.Kind.LLAMA, ctx=256),
        member("asr", tiny_whisper, engine.Kind.TRANSCRIBE),
    )
    group = engine.plan_group_on_host(members, real_hw).unwrap()

    def ask(running: Mapping[str, Running]) -> dict[str, int]:
        codes = {}
        for name in ("chat", "small"):
            body = {"prompt": "Hello", "n_predict": 4}
            codes[name] = http(running[name].endpoint.url + "/completion", body)[0]
        codes["asr"] = _transcribe(running["asr"].endpoint.url + "/inference", wav.read_bytes())
        return codes

    with engine.run_group(group, ready_timeout=120) as running:
        codes = ask(running)
        pids = [running[i].pid for i in running]
    assert codes == {"chat": 200, "small": 200, "asr": 200}
    assert not any(alive(p) for p in pids)
    assert all(running[i].exit_reason is not None for i in running)
    _no_children()


def _transcribe(url: str, audio: bytes) -> int:
    import urllib.request

    boundary = "exedra-group-test"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
            "Content-Type: audio/wav\r\n\r\n"
        ).encode()
        + audio
        + f"\r\n--{boundary}--\r\n".encode()
    )
    req = urllib.request.Request(
        url, data=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return int(r.status)


def test_logs_reach_a_callable_and_a_stream_tagged_with_the_member_id(
    adapter: GroupAdapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    import io

    got: list[tuple[str, str]] = []
    group = group_of(fake("a", "ok"), fake("b", "ok"))
    adapter.session(
        group, lambda running: None, logs=lambda member, line: got.append((member, line))
    )
    for name in ("a", "b"):
        lines = [line for m, line in got if m == name]
        assert any(line.startswith("fake executor: listening on") for line in lines), got
        assert all(not line.endswith("\n") for line in lines)
    stream = io.BytesIO()
    adapter.session(group_of(fake("c", "ok"), fake("d", "ok")), lambda r: None, logs=stream)
    lines = stream.getvalue().decode().splitlines()
    assert any(line.startswith("c: fake executor: listening on") for line in lines), lines
    assert any(line.startswith("d: fake executor: listening on") for line in lines), lines
    assert all(line[:3] in ("c: ", "d: ") for line in lines), lines


def test_logs_a_callable_cannot_take_member_and_line_is_refused_before_anything_starts(
    adapter: GroupAdapter, fake: Callable[..., engine.LaunchPlan]
) -> None:
    lines: list[str] = []
    group = group_of(fake("a", "ok"))
    with pytest.raises(TypeError, match=r"logs\(member_id, line\)"):
        adapter.session(group, lambda running: None, logs=lines.append)
    with pytest.raises(TypeError, match="is no member of the group"):
        adapter.session(group, lambda running: None, logs={"zz": None})
    with pytest.raises(TypeError, match="not int"):
        adapter.session(group, lambda running: None, logs=3)
    assert psutil.Process().children(recursive=True) == []
