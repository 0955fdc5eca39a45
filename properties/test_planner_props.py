"""Invariants of layering, planning and explanation (issue 5: 1, 3, 4, 6, 7)."""

from __future__ import annotations

import builtins
import os
import socket
import time
from typing import Any

import msgspec
import pytest
from hypothesis import assume, find, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success

from exedra_engine import Kind, LaunchPlan, explain_launch, plan_launch
from exedra_engine._core.executors.builtin import executor_profile
from exedra_engine._core.plan.endpoint import resolve_endpoint
from exedra_engine._core.plan.launch_plan import read_afresh, read_plan
from exedra_engine._core.plan.layer_checks import Layer
from exedra_engine._core.plan.layers import merge
from properties import executor_model
from properties.strategies import HW, REPEATABLE, argv, env, keys, requests

PROFILE = executor_profile(Kind.LLAMA)
TABLE = PROFILE.flags


def canonical(tokens: tuple[str, ...]) -> list[tuple[str | None, tuple[str, ...], bool]]:
    """(key, values, negated) per option, through the table: spellings and =forms folded."""
    return [(i.key, i.values, i.negated) for i in TABLE.split_items(tokens, "t")]


def effective(args: tuple[str, ...], envmap: dict[str, str]) -> dict[str, object]:
    """What the executor ends up with per non-repeatable setting: flag beats env."""
    out: dict[str, object] = {}
    for name, value in envmap.items():
        flag = TABLE.flag_for_env(name)
        if flag is not None and not flag.repeatable:
            out[flag.key] = ("env", value)
    for key, values, negated in canonical(args):
        if key is not None and not TABLE.flags[key].repeatable:
            out[key] = (values, negated)
    return out


def planned(req: Any) -> LaunchPlan:
    """The plan of a generated request; requests that cannot be planned are discarded
    (counted as invalid by hypothesis, which fails the run if that is most of them)."""
    r = plan_launch(req[0], HW, req[1])
    assume(isinstance(r, Success))
    return r.unwrap()


layers_st = st.lists(st.tuples(argv(), env()), min_size=1, max_size=5)


def build(layer_inputs: list[tuple[tuple[str, ...], dict[str, str]]]) -> list[Layer]:
    return [
        Layer(name=f"L{i}", rank=i, args=a, env=tuple(e.items()))
        for i, (a, e) in enumerate(layer_inputs)
    ]


@given(layers_st)
def test_highest_layer_wins_exactly_once(layer_inputs: Any) -> None:
    merged = merge(PROFILE, build(layer_inputs))
    envmap = dict(e.split("=", 1) for e in merged.env)
    got = effective(merged.args, envmap)
    # The oracle: what each layer alone would set, applied low to high (within a layer the
    # flag beats the variable, as in the executor).
    want: dict[str, object] = {}
    for a, e in layer_inputs:
        want.update(effective(a, e))
    assert got == want
    # Exactly once: one argv occurrence or one variable per setting, never both.
    keys_in_argv = [
        k for k, _, _ in canonical(merged.args) if k is not None and not TABLE.flags[k].repeatable
    ]
    assert len(keys_in_argv) == len(set(keys_in_argv))
    for k in keys_in_argv:
        assert not any(e in envmap for e in TABLE.flags[k].env)
    # Repeatable flags accumulate in layer order.
    for flag in REPEATABLE:
        expect = [t for a, _ in layer_inputs for i, t in enumerate(a[1:]) if a[i] == flag]
        got_vals = [t for i, t in enumerate(merged.args[1:]) if merged.args[i] == flag]
        assert got_vals == expect


@given(layers_st, st.integers(0, 5))
def test_an_empty_layer_changes_nothing(layer_inputs: Any, at: int) -> None:
    layers = build(layer_inputs)
    with_empty = [*layers, Layer(name="empty", rank=at, args=(), env=())]
    a = merge(PROFILE, layers)
    b = merge(PROFILE, sorted(with_empty, key=lambda x: x.rank))
    assert (a.args, a.env) == (b.args, b.env)


@given(layers_st)
def test_unknown_flags_keep_their_relative_order(layer_inputs: Any) -> None:
    merged = merge(PROFILE, build(layer_inputs))
    tokens_in = [
        t for a, _ in layer_inputs for t in a if t in ("--frobnicate", "--experimental-x", "-zz")
    ]
    tokens_out = [t for t in merged.args if t in ("--frobnicate", "--experimental-x", "-zz")]
    assert tokens_out == tokens_in


@given(requests())
def test_plan_agrees_with_resolution_and_the_executor_model(req: Any) -> None:
    p = planned(req)
    res = resolve_endpoint(Kind.LLAMA, p.args, p.env).unwrap()
    assert (p.host, p.port, p.api_key) == (res.host, res.port, res.api_key)
    envmap = dict(e.split("=", 1) for e in p.env)
    host, port, accepted = executor_model.listen(p.args, envmap)
    assert (host, port) == (p.host, p.port)
    assert list(res.api_keys) == accepted


@given(requests())
def test_the_planners_reading_is_the_plans_argv_and_env_read_afresh(req: Any) -> None:
    p = planned(req)
    profile = executor_profile(Kind.LLAMA)
    assert read_plan(p) == read_afresh(p, profile)
    decoded = msgspec.json.decode(msgspec.json.encode(p), type=LaunchPlan)
    assert read_plan(decoded) == read_afresh(p, profile)


@given(requests(), argv(max_size=3), env())
def test_launch_reads_back_caller_edits(req: Any, more_args: Any, more_env: Any) -> None:
    p = planned(req)
    edited = msgspec.structs.replace(
        p, args=(*p.args, *more_args), env=(*p.env, *(f"{k}={v}" for k, v in more_env.items()))
    )
    envmap = dict(e.split("=", 1) for e in edited.env)
    res = resolve_endpoint(Kind.LLAMA, edited.args, edited.env)
    try:
        host, port, accepted = executor_model.listen(edited.args, envmap)
    except executor_model.Refused:
        assert isinstance(res, Failure)
        return
    assert isinstance(res, Success), res
    got = res.unwrap()
    assert (got.host, got.port, list(got.api_keys)) == (host, port, accepted)


@given(requests())
def test_deterministic_and_json_round_trip(req: Any) -> None:
    spec, con = req
    a = plan_launch(spec, HW, con)
    b = plan_launch(spec, HW, con)
    if isinstance(a, Failure):
        assert type(a.failure()) is type(b.failure()) and str(a.failure()) == str(b.failure())
        return
    ja, jb = msgspec.json.encode(a.unwrap()), msgspec.json.encode(b.unwrap())
    assert ja == jb
    assert msgspec.json.decode(ja, type=LaunchPlan) == a.unwrap()


def _forbidden(*_: Any, **__: Any) -> Any:
    raise AssertionError("the pure planner performed I/O")


@given(requests())
def test_pure_planner_touches_no_file_network_or_clock(req: Any) -> None:
    spec, con = req
    expected = plan_launch(spec, HW, con)
    with pytest.MonkeyPatch.context() as mp:
        for target, name in [
            (builtins, "open"),
            (os, "open"),
            (os, "stat"),
            (os, "listdir"),
            (os, "getenv"),
            (socket, "socket"),
            (socket, "create_connection"),
            (time, "time"),
            (time, "monotonic"),
            (time, "perf_counter"),
        ]:
            mp.setattr(target, name, _forbidden)
        mp.setattr(os, "environ", {})
        got = plan_launch(spec, HW, con)
    # Compared as values, not by repr: a repr hides what may be secret.
    if isinstance(expected, Failure):
        assert isinstance(got, Failure)
        assert type(got.failure()) is type(expected.failure())
        assert str(got.failure()) == str(expected.failure())
    else:
        assert got.unwrap() == expected.unwrap()


@given(requests(), keys, keys, keys)
def test_no_api_key_reaches_argv_or_an_error(req: Any, k1: str, k2: str, k3: str) -> None:
    spec, con = req
    spec = msgspec.structs.replace(spec, run_args=(*spec.run_args, "--api-key", k1))
    con = msgspec.structs.replace(con, api_key=k2, extra_args=(*con.extra_args, "--api-key", k3))
    r = plan_launch(spec, HW, con)
    if isinstance(r, Failure):
        text = str(r.failure())
        assert k1 not in text and k2 not in text and k3 not in text
        return
    p = r.unwrap()
    for k in (k1, k2, k3):
        assert not any(k in a for a in p.args)
        assert k in resolve_endpoint(Kind.LLAMA, p.args, p.env).unwrap().api_keys
        assert k not in repr(p)


@given(requests())
def test_explain_names_the_layer_that_set_each_token(req: Any) -> None:
    spec, con = req
    r = explain_launch(spec, HW, con)
    assume(isinstance(r, Success))
    e = r.unwrap()
    inputs = {"run_args": spec.run_args, "caller": con.extra_args}
    if con.overrides is not None:
        eng = con.overrides.engines.get(Kind.LLAMA)
        inputs["config engines.llama"] = eng.args if eng else ()
        mod = con.overrides.models.get(spec.id)
        inputs[f"config models.{spec.id}"] = mod.args if mod else ()
    env_inputs = {"caller": dict(x.split("=", 1) for x in con.extra_env)}
    if con.overrides is not None:
        env_inputs["config env"] = con.overrides.env
    for s in e.sources:
        if s.what == "arg" and s.layer in inputs:
            layer_items = [i.tokens for i in TABLE.split_items(inputs[s.layer], "t")]
            assert tuple(s.text.split(" ")) in layer_items, (s, inputs[s.layer])
        if s.what == "env" and s.layer in env_inputs:
            name, value = s.text.split("=", 1)
            assert env_inputs[s.layer].get(name) == value
        assert s.text in " ".join(e.plan.args) or s.text in e.plan.env


def _plans(req: Any) -> LaunchPlan | None:
    r = plan_launch(*req[:1], HW, req[1])
    return r.unwrap() if isinstance(r, Success) else None


@pytest.mark.skipif(
    os.environ.get("HYPOTHESIS_PROFILE") != "soak",
    reason="strategy coverage (up to 5000 draws per case, ~15 s): soak profile only (just soak)",
)
@pytest.mark.parametrize(
    "what", ["=form over a config layer", "caller port", "env beats a lower flag"]
)
def test_the_strategies_reach_the_interesting_cases(what: str) -> None:
    # The properties are only as good as their inputs: each case must be reachable.
    def reached(req: Any) -> bool:
        p = _plans(req)
        con = req[1]
        if p is None:
            return False
        if what == "=form over a config layer":
            return con.overrides is not None and any("=" in t for t in con.extra_args)
        if what == "caller port":
            return "--port" in con.extra_args or any("PORT" in e for e in con.extra_env)
        return any(e.startswith("LLAMA_ARG_CTX_SIZE") for e in p.env) and con.ctx > 0

    assert find(requests(), reached, settings=settings(max_examples=5000, database=None))
