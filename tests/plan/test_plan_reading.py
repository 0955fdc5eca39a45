"""A plan read once: the planner records the reading of a plan it makes (so nothing splits
its argv again), an edited or decoded plan is read once, and the reading holds what the
executor would read from the argv and env, the endpoint included (or why there is none)."""

from __future__ import annotations

import re

import msgspec
import pytest

from exedra_engine import (
    Constraints,
    Kind,
    LaunchPlan,
    ModelSpec,
    NoEndpoint,
    PlanError,
    plan_launch,
)
from exedra_engine._core.executors.builtin import executor_profile
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.plan.endpoint import resolve
from exedra_engine._core.plan.launch_plan import read_afresh, read_plan
from exedra_engine._core.values import ModelFile
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
    before = len(splits)
    edited = msgspec.structs.replace(plan, args=(*plan.args, "--port", "9100"))
    first, again = read_plan(edited), read_plan(edited)
    assert first is again
    assert splits[before:] == [edited.args]  # once, when the edited plan was made
    assert first.resolved().port == 9100 == edited.port
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
    # `plan/launch_plan.py` only; everyone else asks `read_plan` (or holds the endpoint).
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
        if path.relative_to(root).as_posix() != "_core/plan/launch_plan.py"
    ]
    assert found == []


def test_a_plan_holds_its_reading_and_nothing_else_does() -> None:
    from exedra_engine._core.plan import launch_plan

    plan = plan_launch(SPEC, hw_with(), Constraints(port=9000)).unwrap()
    reading = read_plan(plan)
    assert read_plan(plan) is reading
    assert launch_plan._HANDOFF[0] == launch_plan._NOTHING  # taken by the plan it was for
    edited = [msgspec.structs.replace(plan, args=(*plan.args, "--seed", str(i))) for i in range(3)]
    assert [read_plan(e).settings["--seed"] for e in edited] == [("0",), ("1",), ("2",)]
    # Neither encoded, nor compared, nor hashed: a plan equals its decoded copy.
    assert msgspec.json.decode(msgspec.json.encode(plan), type=LaunchPlan) == plan
    assert hash(msgspec.structs.replace(plan)) == hash(plan)


def test_the_endpoint_fields_are_views_of_the_argv_and_env() -> None:
    plan = plan_launch(SPEC, hw_with(), Constraints(port=9000, api_key="k1")).unwrap()
    assert (plan.port, plan.api_key) == (9000, "k1")
    edited = msgspec.structs.replace(
        plan,
        args=(*plan.args, "--host", "10.0.0.7", "--port", "9100"),
        env=tuple(e for e in plan.env if not e.startswith("LLAMA_API_KEY=")),
    )
    assert (edited.host, edited.port, edited.api_key) == ("10.0.0.7", 9100, "")
    assert edited.url == "http://10.0.0.7:9100"
    # Set separately, they are read back from the argv all the same.
    assert msgspec.structs.replace(plan, host="x", port=1, api_key="k2") == plan
    assert LaunchPlan(**{**msgspec.structs.asdict(plan), "port": 1}).port == 9000


def test_a_decoded_plan_with_stale_fields_gets_its_argvs_endpoint() -> None:
    plan = plan_launch(SPEC, hw_with(), Constraints(port=9000)).unwrap()
    raw = msgspec.json.decode(msgspec.json.encode(plan))
    raw["args"] = [*raw["args"], "--port", "9200"]
    decoded = msgspec.json.decode(msgspec.json.encode(raw), type=LaunchPlan)
    assert decoded.port == 9200 and raw["port"] == 9000
    assert msgspec.json.decode(msgspec.json.encode(decoded))["port"] == 9200


def test_the_files_are_the_argvs_with_the_sizes_given() -> None:
    plan = plan_launch(SPEC, hw_with(), Constraints()).unwrap()
    assert [f.path for f in plan.files] == ["/m/chat.gguf"]
    sized = msgspec.structs.replace(plan, files=(ModelFile(path="/m/chat.gguf", size=77),))
    assert [(f.path, f.size, f.role) for f in sized.files] == [("/m/chat.gguf", 77, "model")]
    assert msgspec.structs.replace(plan, files=()).files == plan.files
    drafted = msgspec.structs.replace(sized, args=(*plan.args, "--model-draft", "/m/d.gguf"))
    assert [(f.path, f.size, f.role) for f in drafted.files] == [
        ("/m/chat.gguf", 77, "model"),
        ("/m/d.gguf", 0, "draft"),
    ]


def test_an_argv_the_executor_refuses_keeps_the_fields_and_says_why_when_read() -> None:
    plan = plan_launch(SPEC, hw_with(), Constraints(port=9000)).unwrap()
    bad = msgspec.structs.replace(plan, args=(*plan.args, "--port"))  # a flag with no value
    assert bad.port == 9000
    with pytest.raises(PlanError):
        read_plan(bad)
