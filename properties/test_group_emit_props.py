"""Laws of a group's router preset and llama-swap groups over random plans and budgets:

- every preset section starts with an absolute ``model``, holds only long flag names the
  executor's table knows (each once), none the router owns, and each key reads back (with
  llama.cpp's own grammar: ``key = value`` up to a ``;`` or ``#``) to the plan's value;
- ``--models-max`` members, any of them, fit the budget together;
- llama-swap's groups put every member in exactly one group, and each group fits the budget.
"""

from __future__ import annotations

import itertools
import re

from hypothesis import given
from hypothesis import strategies as st

from exedra_engine import CPU, Constraints, ExecutorInfo, Hardware, Kind, ModelSpec, plan_launch
from exedra_engine._core.emit.group.llama_swap import fitting_groups
from exedra_engine._core.emit.group.router import models_max, router_preset
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.group.values import GroupPlan, MemberShare
from exedra_engine.errors import EmitError

HW = Hardware(
    cpu=CPU(threads=8),
    executors=(ExecutorInfo(kind=Kind.LLAMA, path="/bin/llama-server"),),
)
FLAGS = BUILTIN.profile("llama").flags
# Flags with one plain value, and switches, that a caller may add (no file they would read).
EXTRA = st.sampled_from(
    [
        ("--ctx-size", "512"),
        ("-c", "1024"),
        ("--batch-size", "64"),
        ("-ub", "32"),
        ("--threads", "2"),
        ("-t", "3"),
        ("--parallel", "2"),
        ("--temp", "0.5"),
        ("--no-webui",),
        ("--jinja",),
        ("--no-mmap",),
        ("--host", "0.0.0.0"),
        ("--alias", "x"),
        ("--chat-template", "chatml"),
        ("--cache-ram", "128"),
    ]
)
_LINE = re.compile(r"^([a-zA-Z_][a-zA-Z0-9_.-]*)[ \t]*=[ \t]*([^;#\r\n]*?)[ \t]*$")
"""A key line as llama.cpp's preset parser reads it (common/preset.cpp's grammar)."""


@st.composite
def groups(draw: st.DrawFn) -> GroupPlan:
    n = draw(st.integers(1, 4))
    plans, shares = [], []
    for i in range(n):
        extra = [tok for pair in draw(st.lists(EXTRA, max_size=4)) for tok in pair]
        spec = ModelSpec(id=f"m{i}", path=f"/srv/m{i}.gguf", kind=Kind.LLAMA)
        con = Constraints(port=18000 + i, extra_args=tuple(extra))
        plans.append(plan_launch(spec, HW, con).unwrap())
        shares.append(MemberShare(id=f"m{i}", port=18000 + i, memory=draw(st.integers(1, 100))))
    budget = draw(st.integers(0, 250))
    return GroupPlan(plans=tuple(plans), shares=tuple(shares), budget=budget)


@given(groups())
def test_sections_hold_the_model_first_and_long_known_unowned_keys(group: GroupPlan) -> None:
    try:
        preset = router_preset(group)
    except EmitError as e:
        # The one refusal these plans can meet: a flag given twice with two values.
        assert "given twice" in str(e)
        return
    sections = preset.text.split("\n\n")[1:]
    assert [s.splitlines()[0] for s in sections] == [f"[{m}]" for m in group.ids]
    for section in sections:
        lines = section.splitlines()[1:]
        keys = [_LINE.match(line).group(1) for line in lines]  # type: ignore[union-attr]
        assert keys[0] == "model" and _LINE.match(lines[0]).group(2).startswith("/")  # type: ignore[union-attr]
        assert len(keys) == len(set(keys))
        for k in keys[1:]:
            known = FLAGS.lookup(f"--{k}")
            assert known is not None and known[0].key == f"--{k}", k
            assert f"--{k}" not in BUILTIN.profile("llama").router_owned


@given(groups())
def test_models_max_members_always_fit_together(group: GroupPlan) -> None:
    n = models_max(group, group.ids)
    assert 1 <= n <= len(group.ids)
    if group.budget and all(s.memory for s in group.shares):
        sizes = [s.memory for s in group.shares]
        fits = all(sum(c) <= group.budget for c in itertools.combinations(sizes, n))
        assert fits or n == 1


@given(groups())
def test_llama_swap_groups_cover_every_member_once_and_fit(group: GroupPlan) -> None:
    parts = fitting_groups(group)
    members = [m for p in parts for m in p]
    assert sorted(members) == sorted(group.ids)
    size = {s.id: s.memory for s in group.shares}
    if group.budget:
        for p in parts:
            assert len(p) == 1 or sum(size[m] for m in p) <= group.budget
