"""One argv reader (issue 20 item 3): every consumer of an argv reads it as the flag table's
`FlagTable.read_items` does, on hostile argvs of both executors.

The walkers the reader replaced are kept here, as they were, as oracles: the endpoint's token
loop must agree with `resolve` exactly (same result, same error), and the checker's reading,
redaction and `with_port` are compared with `split_items`' items."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exedra_engine._core.config.check import check_plan_layers
from exedra_engine._core.executors.builtin import BUILTIN, executor_profile
from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.kinds import Kind
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.endpoint import _keys, _port, resolve
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.plan.ports import with_port
from exedra_engine._core.secrets import REDACTED, redact_args
from exedra_engine._core.values import ModelSpec
from exedra_engine.errors import EngineError, PlanError

KINDS = ("llama", "transcribe")


def _names(p: ExecutorProfile) -> list[str]:
    return sorted(n for f in p.flags.flags.values() for n in (*f.names, *f.negations))


_ENDPOINT = ("--host", "--port", "--api-key", "-p", "--listen-port", "--alias", "-a")
_VALUES = ("8080", " 9000", "9001x", "abc", "0", "-1", "-1.5", "x", "", "a,b", "127.0.0.1")
_ODD = ("--", "-", "--frobnicate", "-zz", "--api-kee", "--no-such=1", "=", "-x=")


@st.composite
def argvs(draw: st.DrawFn, kind: str) -> tuple[str, ...]:
    """Any mix of the table's own spellings (with and without values, inline or not),
    the endpoint's and key flags, values that look like flags or numbers, and tokens no
    table knows."""
    names = _names(executor_profile(kind))
    flag = st.sampled_from(names) | st.sampled_from(_ENDPOINT)
    token = st.one_of(
        flag,
        st.sampled_from(_VALUES),
        st.sampled_from(_ODD),
        st.builds(lambda f, v: f"{f}={v}", flag, st.sampled_from(_VALUES)),
        st.text(max_size=4),
    )
    return tuple(draw(st.lists(token, max_size=8)))


def _old_from_args(
    p: ExecutorProfile, args: Sequence[str]
) -> tuple[str | None, int | None, list[str]]:
    """`endpoint._from_args` before the reader: its own token loop."""
    table = p.flags
    host: str | None = None
    port: int | None = None
    keys: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        hit = table.lookup(tok)
        if hit is None:
            name, eq, _ = tok.partition("=")
            if eq and table.lookup(name) is not None:
                raise PlanError(
                    f"{p.binary} does not accept {name}=...; pass {name} and its value as two "
                    "arguments"
                )
            i += 1
            continue
        flag, negated = hit
        nargs = 0 if negated else flag.nargs
        if nargs and i + nargs >= len(args):
            raise PlanError(f"{p.binary}: flag {tok} needs a value")
        value = args[i + 1] if nargs else ""
        if flag.key == p.host_flag:
            host = value
        elif flag.key == p.port_flag:
            port = _port(value, f"{tok} {value!r}")
        elif flag.key == p.key_flag:
            keys.extend(_keys(p, value))
        i += 1 + nargs
    return host, port, keys


def _outcome(f: object, *args: object) -> object:
    try:
        return f(*args)  # type: ignore[operator]
    except EngineError as e:
        return (type(e).__name__, str(e))


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
def test_endpoint_reads_as_the_old_loop(kind: str, data: st.DataObject) -> None:
    p = executor_profile(kind)
    args = data.draw(argvs(kind))
    from exedra_engine._core.plan import endpoint

    assert _outcome(endpoint._from_args, p, args) == _outcome(_old_from_args, p, args)
    # and through the public resolution, whose endpoint checks come after
    got = _outcome(resolve, kind, (*args, p.port_flag, "8080"), {})
    if not isinstance(got, tuple):
        assert got.port == 8080


def _plain(items: Sequence[Item]) -> list[tuple[object, ...]]:
    return [(it.key, it.tokens, it.values, it.negated, it.at, it.inline) for it in items]


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
def test_split_items_is_read_items_without_problems(kind: str, data: st.DataObject) -> None:
    table = executor_profile(kind).flags
    args = data.draw(argvs(kind))
    read = table.read_items(args)
    # every token is read once, in order
    assert [
        i for it in read for i in range(it.at, it.at + (1 if it.inline else len(it.tokens)))
    ] == list(range(len(args)))
    for it in read:
        got = [args[i] for i in it.value_at]
        if it.inline:
            got = [got[0].partition("=")[2]] if it.values else []
        assert got == list(it.values)
    bad = [it for it in read if it.problem is not None]
    try:
        split = table.split_items(args, "x")
    except PlanError as e:
        assert bad, e
        assert f"flag {bad[0].tokens[0]} " in str(e)
        return
    assert not bad
    assert _plain(split) == _plain(read)


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
def test_the_checker_reads_as_split_items(kind: str, data: st.DataObject) -> None:
    """Where the executor's reading and the checker's guess cannot differ (no value looks
    like a flag, every token is known), the checker reads the same items; and each item the
    checker's reading refuses is one finding of that code, at that position."""
    p = executor_profile(kind)
    table = p.flags
    args = data.draw(argvs(kind))
    checked = table.read_items(args, checking=True)
    try:
        split = table.split_items(args, "x")
    except PlanError:
        split = None
    if split is not None and all(
        it.key is not None
        and not any(v[:2] == "--" or table.lookup(v.partition("=")[0]) for v in it.values)
        for it in split
    ):
        assert _plain(checked) == _plain(split)
    found = {(f.code, f.path) for f in check_plan_layers(p, table, run_args=args)}
    for it in checked:
        code = "wrong-kind" if it.problem == "unknown-flag" else it.problem
        if it.problem is not None:
            assert (code, f"run_args[{it.at}]") in found or (
                it.problem,
                f"run_args[{it.at}]",
            ) in found


@pytest.mark.parametrize("kind", KINDS)
@given(data=st.data())
def test_redaction_is_never_weaker_than_the_table(kind: str, data: st.DataObject) -> None:
    """Redaction reads no table (it must hold for an argv of any executor), yet hides every
    value that the table's reading gives a key flag."""
    p = executor_profile(kind)
    args = data.draw(argvs(kind))
    shown = redact_args(args)
    for it in p.flags.read_items(args):
        if it.key is None or not any(
            BUILTIN.is_secret_flag(n) for n in p.flags.flags[it.key].names
        ):
            continue
        for i in it.value_at:
            value = args[i].partition("=")[2] if it.inline else args[i]
            if value:
                assert REDACTED in shown[i], (args, i)


@given(data=st.data())
def test_with_port_moves_the_port_the_executor_reads(data: st.DataObject) -> None:
    args = data.draw(argvs("llama"))
    p = executor_profile("llama")
    table = p.flags
    try:
        table.split_items(args, "x")
        r = resolve("llama", (*args, "--port", "8080"), {})
    except EngineError:
        return
    plan = LaunchPlan(
        spec=ModelSpec(id="m", path="/m.gguf", kind=Kind.LLAMA),
        command="llama-server",
        args=(*args, "--port", "8080"),
        host=r.host,
        port=r.port,
        api_key=r.api_key,
        ready="/health",
        port_scanned=True,
    )
    moved = with_port(plan, 9099)
    assert moved.port == 9099
    last = [it for it in table.read_items(moved.args) if it.key == p.port_flag][-1]
    assert moved.args[last.value_at[0]] == "9099"
    assert msgspec.structs.replace(moved, args=plan.args, port=8080) == plan
