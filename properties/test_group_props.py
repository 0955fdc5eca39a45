"""Laws of the group planner over random groups, hosts and facts:

- ports and CPU sets never overlap (when there are at least as many CPUs as members);
- the members' resident totals never exceed the budget, and each stays within its share
  (a lone whisper-server is planned as `plan_launch` plans it: its estimate is said, not
  judged);
- a group of one equals the plan `plan_launch` makes;
- equal inputs give a byte-identical group plan.
"""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure

from exedra_engine import (
    CPU,
    GPU,
    Constraints,
    Device,
    DoesNotFit,
    ExecutorInfo,
    GroupMember,
    Hardware,
    Kind,
    MemberFacts,
    ModelSpec,
    plan_group,
    plan_launch,
)
from exedra_engine._core.gguf.inventory import ModelInventory
from properties.test_memory_props import inventories

EXES = (
    ExecutorInfo(kind=Kind.LLAMA, path="/bin/llama-server", backends=("cpu",)),
    ExecutorInfo(kind=Kind.TRANSCRIBE, path="/bin/whisper-server", backends=("cpu",)),
)


@st.composite
def hosts(draw: st.DrawFn) -> tuple[Hardware, tuple[int, ...] | None]:
    threads = draw(st.integers(1, 32))
    available = draw(st.one_of(st.none(), st.integers(64 << 20, 256 << 30)))
    free = draw(st.lists(st.integers(256 << 20, 48 << 30), max_size=2))
    gpus = tuple(
        GPU(card=f"card{i}", driver="amdgpu", vram=f, vram_free=f) for i, f in enumerate(free)
    )
    exes = EXES if not gpus else (GPU_LLAMA, EXES[1])
    if draw(st.booleans()):
        # The devices as the executor lists them (--list-devices): with or without the
        # kernel's view of them (a Vulkan device with no DRM node), or none at all.
        devices = tuple(
            Device(name=f"Vulkan{i}", description="d", total=f, free=f) for i, f in enumerate(free)
        )
        gpus = draw(st.sampled_from([(), gpus]))
        exes = (msgspec.structs.replace(GPU_LLAMA, devices=devices, devices_listed=True), EXES[1])
    hw = Hardware(
        cpu=CPU(threads=threads, ram=512 << 30, available=available), gpus=gpus, executors=exes
    )
    cpus = draw(
        st.one_of(
            st.none(),
            st.lists(st.integers(0, 127), min_size=1, max_size=32, unique=True).map(tuple),
        )
    )
    return hw, cpus


@st.composite
def groups(draw: st.DrawFn) -> tuple[tuple[GroupMember, ...], tuple[MemberFacts, ...]]:
    n = draw(st.integers(1, 5))
    members, facts = [], []
    for i in range(n):
        whisper = draw(st.booleans())
        kind = Kind.TRANSCRIBE if whisper else Kind.LLAMA
        c = Constraints(
            port=draw(st.sampled_from([0, 0, 0, 20000 + i])),
            ctx=0 if whisper else draw(st.sampled_from([0, 0, 2048, 8192])),
        )
        spec = ModelSpec(id=f"m{i}", path=f"/m/{i}", kind=kind)
        members.append(GroupMember(spec=spec, constraints=c, weight=draw(st.integers(1, 4))))
        if whisper:
            facts.append(MemberFacts(file_size=draw(st.integers(0, 2 << 30))))
        else:
            inv: ModelInventory | None = draw(st.one_of(st.none(), inventories()))
            facts.append(MemberFacts(inventory=inv))
    return tuple(members), tuple(facts)


GPU_LLAMA = ExecutorInfo(kind=Kind.LLAMA, path="/bin/llama-server", backends=("cpu", "vulkan"))
PORTS = st.frozensets(st.integers(18080, 18100), max_size=8)


@given(groups(), hosts(), PORTS)
def test_ports_and_cpu_sets_never_overlap(
    group: tuple[tuple[GroupMember, ...], tuple[MemberFacts, ...]],
    host: tuple[Hardware, tuple[int, ...] | None],
    in_use: frozenset[int],
) -> None:
    (members, facts), (hw, cpus) = group, host
    got = plan_group(members, hw, facts=facts, ports_in_use=in_use, cpus=cpus)
    if isinstance(got, Failure):
        assert isinstance(got.failure(), DoesNotFit)
        return
    g = got.unwrap()
    ports = [p.port for p in g.plans]
    assert len(set(ports)) == len(ports)
    assert [s.port for s in g.shares] == ports
    assert not set(ports) & in_use
    n_cpus = len(cpus) if cpus is not None else hw.cpu.threads
    sets = [set(s.cpus) for s in g.shares]
    if len(members) > 1 and n_cpus >= len(members):
        assert all(sets)
        assert sum(len(s) for s in sets) == len(set().union(*sets))  # disjoint
    if cpus is not None:
        assert set().union(*sets) <= set(cpus)


@given(groups(), hosts())
def test_resident_totals_never_exceed_the_budget(
    group: tuple[tuple[GroupMember, ...], tuple[MemberFacts, ...]],
    host: tuple[Hardware, tuple[int, ...] | None],
) -> None:
    (members, facts), (hw, cpus) = group, host
    got = plan_group(members, hw, facts=facts, cpus=cpus)
    if isinstance(got, Failure):
        assert isinstance(got.failure(), DoesNotFit)
        assert "needs at least" in str(got.failure()) or "of host memory" in str(got.failure())
        return
    g = got.unwrap()
    if hw.cpu.available is None:
        return  # memory unknown: not judged, as a single plan is not
    assert sum(s.memory for s in g.shares) <= g.budget
    if len(members) == 1 and g.shares[0].resident > g.budget:
        # A lone member is planned as `plan_launch` plans it, which judges a llama plan
        # (refused above) but not whisper-server's file estimate: said, not refused.
        assert members[0].spec.kind == Kind.TRANSCRIBE
        assert any("is above the" in n for n in g.notes)
        return
    assert sum(s.resident for s in g.shares) <= g.budget
    for plan, share in zip(g.plans, g.shares, strict=True):
        assert share.resident <= share.memory
        if plan.memory is not None:
            assert plan.memory.host.total == share.resident
    for j, budget in enumerate(g.device_budgets):
        reserved = [
            p.memory.devices[j].reserved if p.memory and j < len(p.memory.devices) else 0
            for p in g.plans
        ]
        if sum(reserved) <= budget:  # else the notes say the fitter keeps layers back
            assert sum(s.device_memory[j] for s in g.shares) <= budget
            assert all(r <= s.device_memory[j] for r, s in zip(reserved, g.shares, strict=True))
        else:
            assert any(f"of GPU {j} " in n for n in g.notes)


@given(groups(), hosts())
def test_a_group_of_one_equals_the_plan(
    group: tuple[tuple[GroupMember, ...], tuple[MemberFacts, ...]],
    host: tuple[Hardware, tuple[int, ...] | None],
) -> None:
    (members, facts), (hw, cpus) = group, host
    m, f = members[0], facts[0]
    one = plan_group((m,), hw, facts=(f,), cpus=cpus)
    alone = plan_launch(m.spec, hw, m.constraints, model=f.model, inventory=f.inventory)
    assert isinstance(one, Failure) == isinstance(alone, Failure)
    if isinstance(alone, Failure):
        assert str(one.failure()) == str(alone.failure())
        return
    assert msgspec.json.encode(one.unwrap().plans[0]) == msgspec.json.encode(alone.unwrap())


@given(groups(), hosts(), PORTS)
def test_equal_inputs_give_a_byte_identical_group_plan(
    group: tuple[tuple[GroupMember, ...], tuple[MemberFacts, ...]],
    host: tuple[Hardware, tuple[int, ...] | None],
    in_use: frozenset[int],
) -> None:
    (members, facts), (hw, cpus) = group, host
    # Rebuilt from JSON: equal values, not the same objects.
    members2 = msgspec.json.decode(msgspec.json.encode(members), type=tuple[GroupMember, ...])
    a = plan_group(members, hw, facts=facts, ports_in_use=in_use, cpus=cpus)
    b = plan_group(members2, hw, facts=facts, ports_in_use=set(in_use), cpus=cpus)
    assert isinstance(a, Failure) == isinstance(b, Failure)
    if isinstance(a, Failure):
        assert str(a.failure()) == str(b.failure())
        return
    assert msgspec.json.encode(a.unwrap()) == msgspec.json.encode(b.unwrap())
