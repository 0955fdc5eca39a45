"""Issue 18, items 1 and 2: the two secret leaks a new user found, as regression tests. The
classes they belong to are properties: properties/test_secret_echo_props.py."""

from __future__ import annotations

import msgspec
import pytest
import trio
from returns.result import Failure

from exedra_engine import LaunchPlan, PlanError, launch, open_instance
from exedra_engine._core.secrets import REDACTED
from tests.conftest import FAKE, Run

KEY = "sk-live-abc123"


def _plan_argv(model: str) -> list[str]:
    return ["plan", "--model", model, "--kind", "llama", "--no-config", "--executor", str(FAKE)]


def test_api_key_flag_is_refused_without_echoing_the_key(run: Run) -> None:
    r = run(*_plan_argv("/m/x.gguf"), "--api-key", KEY)
    assert r.code == 2
    assert KEY not in r.err and KEY not in r.out
    assert "--api-key-env VAR" in r.err  # says what to do instead


def test_no_option_abbreviations(run: Run) -> None:
    r = run(*_plan_argv("/m/x.gguf"), "--ct", "5", "--json")
    assert r.code == 2
    assert "unrecognized option --ct; did you mean --ctx?" in r.err
    # the full name still works
    assert run(*_plan_argv("/m/x.gguf"), "--ctx", "5", "--json").code == 0


def test_a_key_given_as_the_variable_name_is_not_echoed(run: Run) -> None:
    r = run(*_plan_argv("/m/x.gguf"), "--api-key-env", KEY)
    assert r.code == 2
    assert KEY not in r.err
    assert "not a variable name" in r.err


def test_a_conventional_variable_name_is_still_named(run: Run) -> None:
    r = run(*_plan_argv("/m/x.gguf"), "--api-key-env", "EXEDRA_TEST_UNSET_KEY")
    assert r.code == 2
    assert "variable EXEDRA_TEST_UNSET_KEY is not set" in r.err


def _saved_plan(run: Run, tiny_llama: object) -> LaunchPlan:
    r = run(
        *_plan_argv(str(tiny_llama)),
        "--api-key-env",
        "EXEDRA_TEST_KEY",
        "--json",
        env={"EXEDRA_TEST_KEY": KEY},
    )
    assert r.code == 0, r.err
    assert KEY not in r.out
    return msgspec.json.decode(r.out, type=LaunchPlan)


def test_saved_plan_names_its_key_source(run: Run, tiny_llama: object) -> None:
    plan = _saved_plan(run, tiny_llama)
    assert plan.key_env == "EXEDRA_TEST_KEY"
    assert f"LLAMA_API_KEY={REDACTED}" in plan.env


def test_a_redacted_plan_cannot_be_launched(run: Run, tiny_llama: object) -> None:
    plan = _saved_plan(run, tiny_llama)

    async def go() -> None:
        async with trio.open_nursery() as nursery:
            got = await launch(nursery, plan)
            assert isinstance(got, Failure)
            err = got.failure()
            assert isinstance(err, PlanError)
            assert "LLAMA_API_KEY" in str(err) and "$EXEDRA_TEST_KEY" in str(err)
            assert KEY not in str(err)
        with pytest.raises(PlanError, match="redaction marker"):
            async with open_instance(plan):
                raise AssertionError("a redacted plan was launched")

    trio.run(go)


@pytest.mark.parametrize(
    "edit",
    [
        {"args": ("--api-key", REDACTED)},
        {"args": (f"--api-key={REDACTED}",)},
        {"env": (f"HF_TOKEN={REDACTED}",)},
    ],
)
def test_the_marker_is_refused_by_every_route(
    run: Run, tiny_llama: object, edit: dict[str, tuple[str, ...]]
) -> None:
    plan = _saved_plan(run, tiny_llama)
    plan = msgspec.structs.replace(
        plan,
        env=tuple(e for e in plan.env if not e.startswith("LLAMA_API_KEY")) + edit.get("env", ()),
        args=plan.args + edit.get("args", ()),
    )

    async def go() -> None:
        async with trio.open_nursery() as nursery:
            got = await launch(nursery, plan)
            assert isinstance(got.failure(), PlanError)

    trio.run(go)
