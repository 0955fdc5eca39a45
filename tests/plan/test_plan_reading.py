"""A plan read once: the planner records the reading of a plan it makes (so nothing splits
its argv again), an edited or decoded plan is read once, and the reading holds what the
executor would read from the argv and env, the endpoint included (or why there is none)."""

from __future__ import annotations

import re

import msgspec
import pytest

from exedra_engine import Constraints, Kind, LaunchPlan, ModelSpec, NoEndpoint, plan_launch
from exedra_engine._core.executors.builtin import executor_profile
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.plan.endpoint import resolve
from exedra_engine._core.plan.reading import read_afresh, read_plan
from tests.group.test_group_plan import hw_with

SPEC = ModelSpec(id="chat", path="/m/chat.gguf", kind=Kind.LLAMA)


@pytest.fixture
def splits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Every argv `FlagTable.split_items` is asked to cut, from the moment it is used."""
    seen: list[tuple[str, ...]] = []
    real = FlagTable.split_items

    def counting(self: FlagTable, argv: tuple[str, ...], where: str) -> object:
        seen.append(tuple(argv))
        return real(self, argv, where)

    monkeypatch.setattr(FlagTable, "split_items", counting)
    return seen


def test_a_plan_the_planner_made_is_never_split_again(splits: list[tuple[str, ...]]) -> None:
    c = Constraints(extra_args=("--api-prefix=/v1/", "--ctx-size", "4096"))
    plan = plan_launch(SPEC, hw_with(), c).unwrap()
    made = len(splits)
    r = read_plan(plan)
    assert len(splits) == made  # recorded by the planner: nothing is read back
    assert r.ready == "/v1/health" == plan.ready
    assert r.settings["--ctx-size"] == ("4096",)
    assert (r.resolved().host, r.resolved().port) == (plan.host, plan.port)
    assert all(plan.args[it.at] == it.tokens[0] for it in r.items)


def test_an_edited_plan_is_read_once_and_its_edits_are_read(
    splits: list[tuple[str, ...]],
) -> None:
    plan = plan_launch(SPEC, hw_with(), Constraints(port=9000)).unwrap()
    edited = msgspec.structs.replace(plan, args=(*plan.args, "--port", "9100"))
    before = len(splits)
    first, again = read_plan(edited), read_plan(edited)
    assert first is again
    assert splits[before:] == [edited.args]
    assert first.resolved().port == 9100
    assert first == read_afresh(edited, executor_profile(Kind.LLAMA))


def test_a_decoded_plan_reads_as_the_plan_it_was() -> None:
    plan = plan_launch(SPEC, hw_with(), Constraints()).unwrap()
    decoded = msgspec.json.decode(msgspec.json.encode(plan), type=LaunchPlan)
    assert read_plan(decoded) == read_plan(plan)


def test_a_plan_with_no_endpoint_is_read_and_says_why_when_asked() -> None:
    plan = LaunchPlan(
        spec=SPEC, command="x", args=("--ctx-size", "8192"), host="h", port=1, ready="/health"
    )
    r = read_plan(plan)
    assert r.endpoint is None and r.settings["--ctx-size"] == ("8192",)
    with pytest.raises(NoEndpoint) as got:
        r.resolved()
    with pytest.raises(NoEndpoint) as want:
        resolve(Kind.LLAMA, plan.args, plan.env)
    assert str(got.value) == str(want.value)


def test_no_module_but_the_reading_reads_a_finished_plans_argv_again() -> None:
    # A finished plan's argv is cut into items, and its endpoint resolved from it, in
    # `plan/reading.py` only; everyone else asks `read_plan` (or holds the endpoint).
    from pathlib import Path

    import exedra_engine

    again = re.compile(
        r"(split_items|read_items)\(\s*\w*\.?(plan|s)\.args"
        r"|resolve(_for|_endpoint)?\([^)]*\bplan\.args"
        r"|(read_settings|memory_settings|named_files|load_files)\([^)]*\bplan\.args"
    )
    root = Path(exedra_engine.__file__).parent
    found = [
        f"{path.relative_to(root)}: {m.group(0)}"
        for path in sorted(root.rglob("*.py"))
        for m in again.finditer(path.read_text())
        if path.relative_to(root).as_posix() != "_core/plan/reading.py"
    ]
    assert found == []


def test_the_record_of_readings_is_bounded() -> None:
    from exedra_engine._core.plan import reading

    plan = plan_launch(SPEC, hw_with(), Constraints(port=9000)).unwrap()
    for i in range(reading._READ_MAX + 50):
        read_plan(msgspec.structs.replace(plan, args=(*plan.args, "--seed", str(i))))
    assert len(reading._READ) == reading._READ_MAX
