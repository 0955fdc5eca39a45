"""What a group plan costs grows with its members, and no faster: the members are capped,
each member's ports are a view of one shared record (not a copy of every earlier port), and
members naming one model file read it once."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from exedra_engine import (
    ConfigError,
    GroupMember,
    Kind,
    ModelSpec,
    PlanError,
    explain_group,
    plan_group,
)
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.group import member as member_module
from exedra_engine._core.group.file import parse_group_file
from exedra_engine._core.group.ports import PortsView, Taken
from exedra_engine._core.plan import planner as planner_module
from exedra_engine._core.plan.layer_checks import Layer
from exedra_engine._core.plan.layers import Merged
from exedra_engine._shell.group_plan import GroupRequest, explain_group_request
from exedra_engine.constants import MAX_GROUP_MEMBERS
from exedra_engine.testing import write_tiny_llama
from tests.group.test_group_plan import TRIO, TRIO_FACTS, hw_with
from tests.memory_host import MemoryHost


def _members(n: int, path: str = "/absent/m.gguf") -> tuple[GroupMember, ...]:
    return tuple(
        GroupMember(spec=ModelSpec(id=f"m{i}", path=path, kind=Kind.LLAMA)) for i in range(n)
    )


def test_a_group_file_with_more_members_than_the_cap_is_refused_in_one_line() -> None:
    n = MAX_GROUP_MEMBERS + 1
    text = "members:\n" + "".join(f"  - {{id: m{i}, model: /m.gguf}}\n" for i in range(n))
    with pytest.raises(ConfigError) as e:
        parse_group_file(text, "big.yaml")
    assert str(e.value) == (
        f"big.yaml:2: members: {n} members, more than {MAX_GROUP_MEMBERS} "
        "(plan fewer executors per group)"
    )


def test_a_library_group_with_more_members_than_the_cap_is_refused() -> None:
    got = plan_group(_members(MAX_GROUP_MEMBERS + 1), hw_with())
    failure = got.failure()
    assert isinstance(failure, PlanError)
    assert f"{MAX_GROUP_MEMBERS + 1} members, more than {MAX_GROUP_MEMBERS}" in str(failure)


def test_a_members_ports_are_a_view_whose_size_does_not_grow_with_the_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Lift the cap to see the growth it guards against: each member holds a view of one
    # shared record, of constant size, where it held a copy of every earlier port.
    monkeypatch.setattr(member_module, "MAX_GROUP_MEMBERS", 2000)
    seen: list[PortsView] = []
    real = Taken.view

    def spy(
        self: Taken, own: str, place: int, kind_only: frozenset[int] = frozenset()
    ) -> PortsView:
        v = real(self, own, place, kind_only)
        seen.append(v)
        return v

    monkeypatch.setattr(Taken, "view", spy)
    g = plan_group(_members(2000), hw_with(threads=64), cpus=range(64)).unwrap()
    ports = [p.port for p in g.plans]
    assert ports == list(range(18080, 18080 + 2000))
    assert len(seen) == 2000
    assert len({id(v._taken) for v in seen}) == 1  # one record for the whole group
    assert {sys.getsizeof(v) for v in seen} == {sys.getsizeof(seen[0])}
    # What the last member may not take is every earlier member's port, and not its own.
    last = seen[-1]
    assert 18080 + 1998 in last and 18080 + 1999 not in last
    assert len(seen[0]) == 0 and len(last) == 1999


def test_the_scan_for_free_ports_is_one_pass_for_the_whole_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[object] = []
    real = PortsView.__contains__

    def counting(self: PortsView, port: object) -> bool:
        asked.append(port)
        return real(self, port)

    monkeypatch.setattr(PortsView, "__contains__", counting)
    taken = Taken({18080, 18082}, {18083: "x"})
    for i in range(100):
        port = taken.scan(18080, i)
        assert port is not None
        taken.give(port, i)
    assert sorted(taken.given)[:3] == [18081, 18084, 18085]
    # Each scan starts where the one before stopped: a port is asked about at most twice
    # (once when it is given), not once per later member.
    assert len(asked) <= 2 * 103


def test_members_naming_one_model_file_read_it_once(tmp_path: Path) -> None:
    data = write_tiny_llama(tmp_path / "one.gguf").read_bytes()
    host = MemoryHost({"/m/one.gguf": data, "/proc/net/tcp": "", "/proc/net/tcp6": ""})
    req = GroupRequest(members=_members(40, "/m/one.gguf"), hardware=hw_with(threads=64))
    e = explain_group_request(req, host, explain=False)
    assert len(e.plan.plans) == 40
    assert all(p.model is not None for p in e.plan.plans)
    assert host.opened.count("/m/one.gguf") <= 2  # the header and inventory read, the size


def test_each_member_is_merged_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Want, floor and share are decided on one merge per member (llama members were
    # merged three times: their want, a bare plan for the floor, their share).
    merged: list[str] = []
    real = planner_module.merge

    def counting(profile: ExecutorProfile, layers: Sequence[Layer], **kw: Any) -> Merged:
        merged.append(profile.kind)
        return real(profile, layers, **kw)

    monkeypatch.setattr(planner_module, "merge", counting)
    g = explain_group(TRIO, hw_with(), facts=TRIO_FACTS).unwrap()
    assert [p.memory is not None for p in g.plan.plans] == [True, True, False]
    assert sorted(merged) == sorted(m.spec.kind for m in TRIO)
