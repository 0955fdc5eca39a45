"""The group planner: several executors planned together on one host (memory, GPU memory,
CPUs and ports shared; a group that cannot fit refused; a group of one as `plan_launch`)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from returns.result import Failure

from exedra_engine import (
    CPU,
    Config,
    Constraints,
    DoesNotFit,
    ExecutorInfo,
    GroupMember,
    GroupPlan,
    Hardware,
    Kind,
    MemberFacts,
    ModelInventory,
    ModelSpec,
    Override,
    PlanError,
    PortInUse,
    explain_group,
    plan_group,
    plan_launch,
    probe,
)
from exedra_engine._core.executors.builtin import WHISPER
from exedra_engine._core.group.cpus import partition_cpus, split_by_weight
from exedra_engine._core.group.memory import whisper_resident
from exedra_engine._core.launch.actual import Actual
from exedra_engine._core.memory.decide import usable_host
from tests.conftest import host
from tests.memory_models import gemma3_270m, llama_135m, model_info

MIB = 1 << 20
LLAMA_EXE = ExecutorInfo(kind=Kind.LLAMA, path="/bin/llama-server", backends=("cpu",))
WHISPER_EXE = ExecutorInfo(kind=Kind.TRANSCRIBE, path="/bin/whisper-server", backends=("cpu",))


def hw_with(threads: int = 4, available: int | None = 20 << 30) -> Hardware:
    return Hardware(
        cpu=CPU(threads=threads, ram=24 << 30, available=available),
        executors=(LLAMA_EXE, WHISPER_EXE),
    )


def member(mid: str, kind: Kind = Kind.LLAMA, weight: int = 1, **c: object) -> GroupMember:
    path = f"/m/{mid}.bin" if kind == Kind.TRANSCRIBE else f"/m/{mid}.gguf"
    return GroupMember(
        spec=ModelSpec(id=mid, path=path, kind=kind),
        constraints=Constraints(**c),  # type: ignore[arg-type]
        weight=weight,
    )


def facts(inv: ModelInventory, mid: str) -> MemberFacts:
    return MemberFacts(model=model_info(inv, f"/m/{mid}.gguf"), inventory=inv)


TRIO = (member("chat"), member("small"), member("asr", Kind.TRANSCRIBE))
TRIO_FACTS = (
    facts(gemma3_270m(), "chat"),
    facts(llama_135m(), "small"),
    MemberFacts(file_size=148_000_000),
)


def test_a_group_of_one_is_planned_exactly_as_plan_launch_plans_it() -> None:
    hw = hw_with()
    f = TRIO_FACTS[0]
    g = plan_group(TRIO[:1], hw, facts=TRIO_FACTS[:1]).unwrap()
    alone = plan_launch(TRIO[0].spec, hw, model=f.model, inventory=f.inventory).unwrap()
    assert msgspec.json.encode(g.plans[0]) == msgspec.json.encode(alone)
    assert g.shares[0].cpus == () and g.shares[0].threads == 0
    assert g.shares[0].memory == g.budget == usable_host(hw)[0]


def test_resident_totals_sum_within_the_budget_and_each_within_its_share() -> None:
    g = plan_group(TRIO, hw_with(), facts=TRIO_FACTS).unwrap()
    assert sum(s.memory for s in g.shares) <= g.budget
    for plan, share in zip(g.plans, g.shares, strict=True):
        assert 0 < share.resident <= share.memory
        if plan.memory is not None:
            assert plan.memory.host.total == share.resident


def test_a_tight_budget_shrinks_automatic_contexts_and_caches_not_weights() -> None:
    roomy = plan_group(TRIO[:2], hw_with(), facts=TRIO_FACTS[:2]).unwrap()
    want = sum(s.resident for s in roomy.shares)
    # Usable = available less the 10% margin: leave about two thirds of what they want.
    tight_hw = hw_with(available=int(want * 0.66 / 0.9))
    tight = plan_group(TRIO[:2], tight_hw, facts=TRIO_FACTS[:2]).unwrap()
    assert sum(s.resident for s in tight.shares) <= tight.budget < want
    for before, after in zip(roomy.plans, tight.plans, strict=True):
        assert before.memory is not None and after.memory is not None
        assert after.memory.host.parts.weights == before.memory.host.parts.weights
        assert after.memory.ctx <= before.memory.ctx
        assert after.memory.host.parts.prompt_cache <= before.memory.host.parts.prompt_cache
    assert any(
        a.memory.ctx < b.memory.ctx
        or a.memory.host.parts.prompt_cache < b.memory.host.parts.prompt_cache
        for a, b in zip(tight.plans, roomy.plans, strict=True)
        if a.memory is not None and b.memory is not None
    )


def test_a_group_that_cannot_fit_is_refused_naming_each_member_and_its_size() -> None:
    got = plan_group(TRIO, hw_with(available=500 * MIB), facts=TRIO_FACTS)
    assert isinstance(got, Failure)
    err = got.failure()
    assert isinstance(err, DoesNotFit)
    text = str(err)
    assert "the group needs at least" in text and "450 MiB usable" in text
    for mid in ("chat", "small", "asr"):
        assert f"{mid} " in text
    assert "MiB" in text.split(":", 1)[1]


def test_whisper_server_gets_its_measured_estimate_as_share_and_resident() -> None:
    g = plan_group(TRIO, hw_with(), facts=TRIO_FACTS).unwrap()
    asr = g.shares[2]
    assert asr.resident == whisper_resident(WHISPER, 148_000_000)
    assert asr.resident == 148_000_000 + (64 << 20) + 148_000_000 * 360 // 1000
    assert g.plans[2].memory is None  # as `plan_launch` plans it: no llama memory plan


def test_cpus_are_partitioned_disjoint_and_flags_pin_each_llama_member() -> None:
    g = plan_group(TRIO, hw_with(threads=4), facts=TRIO_FACTS, cpus=(0, 1, 2, 3)).unwrap()
    sets = [set(s.cpus) for s in g.shares]
    assert sum(len(s) for s in sets) == 4 and set().union(*sets) == {0, 1, 2, 3}
    chat = g.plans[0].args
    first = g.shares[0]
    lo, hi = first.cpus[0], first.cpus[-1]
    assert "--cpu-range" in chat and chat[chat.index("--cpu-range") + 1] == f"{lo}-{hi}"
    assert chat[chat.index("--threads") + 1] == str(first.threads)
    assert chat[chat.index("--threads-batch") + 1] == str(first.threads)
    assert chat[chat.index("--cpu-strict") + 1] == "1"
    asr = g.plans[2].args
    assert asr[asr.index("--threads") + 1] == str(g.shares[2].threads)
    assert "--cpu-range" not in asr  # whisper-server has no pinning flag


def test_weights_divide_the_cpus_and_a_non_contiguous_set_becomes_a_mask() -> None:
    ms = (member("a", weight=3), member("b"))
    fs = (facts(llama_135m(), "a"), facts(llama_135m(), "b"))
    g = plan_group(ms, hw_with(threads=6), facts=fs, cpus=(0, 2, 4, 6, 8, 10)).unwrap()
    assert [len(s.cpus) for s in g.shares] == [4, 2]
    b = g.plans[1].args
    assert b[b.index("--cpu-mask") + 1] == hex((1 << 8) | (1 << 10))


def test_fewer_cpus_than_members_share_cores_with_one_thread_each_and_say_so() -> None:
    g = plan_group(TRIO, hw_with(threads=2), facts=TRIO_FACTS, cpus=(0, 1)).unwrap()
    assert [s.threads for s in g.shares] == [1, 1, 1]
    assert [s.cpus for s in g.shares] == [(0,), (1,), (0,)]
    assert any("fewer CPUs than members" in n for n in g.notes)


def test_cpu_ids_unknown_are_assumed_from_the_count_and_said() -> None:
    g = plan_group(TRIO[:2], hw_with(threads=4), facts=TRIO_FACTS[:2]).unwrap()
    assert [s.cpus for s in g.shares] == [(0, 1), (2, 3)]
    assert any("assumed 0-3" in n for n in g.notes)


def test_ports_are_distinct_from_the_base_skipping_ports_in_use_and_explicit_ones() -> None:
    ms = (member("a"), member("b", port=18081), member("c"))
    fs = (facts(llama_135m(), "a"),) * 3
    g = plan_group(ms, hw_with(), facts=fs, ports_in_use={18080}).unwrap()
    assert [s.port for s in g.shares] == [18082, 18081, 18083]
    assert [p.port for p in g.plans] == [18082, 18081, 18083]


def test_two_members_asking_for_one_port_are_refused_naming_both() -> None:
    ms = (member("a", port=9000), member("b", port=9000))
    got = plan_group(ms, hw_with())
    assert isinstance(got, Failure) and isinstance(got.failure(), PortInUse)
    assert "a and b" in str(got.failure())


@pytest.mark.parametrize(
    ("members", "said"),
    [
        ((), "at least one member"),
        ((member("a"), member("a")), "members[1] (a): the id is used"),
        ((member("a", weight=0),), "weight 0 is below 1"),
    ],
)
def test_bad_members_are_refused_naming_the_member(
    members: tuple[GroupMember, ...], said: str
) -> None:
    got = plan_group(members, hw_with())
    assert isinstance(got, Failure) and isinstance(got.failure(), PlanError)
    assert said in str(got.failure())


def test_running_plans_and_measured_peaks_are_taken_out_of_the_budget() -> None:
    hw = hw_with()
    alone = plan_group(TRIO[:1], hw, facts=TRIO_FACTS[:1]).unwrap()
    peak = Actual(peak_rss=3 << 30)
    joined = plan_group(TRIO[:1], hw, facts=TRIO_FACTS[:1], running=(peak, alone.plans[0])).unwrap()
    held = (3 << 30) + alone.shares[0].resident
    assert joined.budget == alone.budget - held
    assert joined.shares[0].port != alone.plans[0].port  # a running plan's port is skipped


def test_device_memory_is_shared_by_what_each_plan_reserves_on_a_gpu_fixture() -> None:
    hw = probe(host("amdgpu")).unwrap()
    gpu_exe = ExecutorInfo(kind=Kind.LLAMA, path="/bin/llama-server", backends=("cpu", "vulkan"))
    hw = msgspec.structs.replace(hw, executors=(gpu_exe,))
    ms = (member("a"), member("b"))
    fs = (facts(gemma3_270m(), "a"), facts(gemma3_270m(), "b"))
    g = plan_group(ms, hw, facts=fs).unwrap()
    assert g.device_budgets == (hw.gpus[0].vram_free,)
    for plan, share in zip(g.plans, g.shares, strict=True):
        assert plan.memory is not None and plan.memory.devices
        assert plan.memory.devices[0].reserved <= share.device_memory[0]
    assert sum(s.device_memory[0] for s in g.shares) <= g.device_budgets[0]
    small = msgspec.structs.replace(
        hw, gpus=(msgspec.structs.replace(hw.gpus[0], vram_free=300 * MIB),)
    )
    # llama.cpp's fitter on (as `plan_launch` leaves it): said, the fitter keeps layers back.
    fitted = plan_group(ms, small, facts=fs).unwrap()
    assert any("of GPU 0 (card0)" in n and "fitter" in n for n in fitted.notes)
    # Switched off by -ngl: judged, as a single plan is.
    pinned = tuple(
        msgspec.structs.replace(m, constraints=Constraints(extra_args=("-ngl", "99"))) for m in ms
    )
    got = plan_group(pinned, small, facts=fs)
    assert isinstance(got, Failure) and isinstance(got.failure(), DoesNotFit)
    assert str(got.failure()).startswith("the group reserves ")
    assert "of GPU 0 (card0) but 300 MiB is free: a " in str(got.failure())


def test_the_groups_constraints_apply_where_a_member_sets_nothing() -> None:
    ms = (member("a", host="127.0.0.2"), member("asr", Kind.TRANSCRIBE))
    g = explain_group(
        ms, hw_with(), Constraints(host="0.0.0.0", api_key="k3y-for-the-group", port_base=20000)
    ).unwrap()
    a, asr = g.plan.plans
    assert a.host == "127.0.0.2" and asr.host == "0.0.0.0"
    assert a.api_key == "k3y-for-the-group" and asr.api_key == ""
    assert a.port >= 20000 and asr.port >= 20000
    assert any("asr: whisper-server has no API key option" in n for n in g.plan.notes)


def test_explain_gives_each_share_and_why() -> None:
    e = explain_group(TRIO, hw_with(), facts=TRIO_FACTS, cpus=(0, 1, 2, 3)).unwrap()
    text = "\n".join(e.shares)
    assert text.startswith("host memory: ")
    assert "chat: memory" in text and "smallest context" in text
    assert "asr: memory" in text and "whisper-server's estimate" in text
    assert "small: CPUs" in text and "small: port" in text
    assert len(e.members) == 3 and e.members[0].memory  # each member's arithmetic


def test_split_by_weight_sums_to_the_total_and_breaks_ties_by_order() -> None:
    assert split_by_weight(5, [1, 1]) == (3, 2)
    assert split_by_weight(7, [3, 1]) == (5, 2)
    assert sum(split_by_weight(1000, [7, 11, 13])) == 1000


def test_a_cpu_quota_below_the_cpu_count_divides_the_threads_too() -> None:
    shares, notes = partition_cpus(tuple(range(8)), 2, [1, 1])
    assert [s.cpus for s in shares] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [s.threads for s in shares] == [1, 1]
    assert notes and "quota" in notes[0]


def test_a_group_plan_round_trips_through_json() -> None:
    g = plan_group(TRIO, hw_with(), facts=TRIO_FACTS, cpus=(0, 1, 2, 3)).unwrap()
    data = msgspec.json.encode(g)
    back = msgspec.json.decode(data, type=GroupPlan)
    assert back == g and back.plan_of("asr") == g.plans[2] and back.ids == ("chat", "small", "asr")
    assert back.members == tuple(zip(g.shares, g.plans, strict=True))


def test_a_group_plan_with_more_plans_than_shares_is_refused_when_made_or_read() -> None:
    g = plan_group(TRIO, hw_with(), facts=TRIO_FACTS).unwrap()
    with pytest.raises(PlanError, match="the group has 3 plans for 2 shares"):
        msgspec.structs.replace(g, shares=g.shares[:2])
    data = msgspec.json.encode({"plans": g.plans, "shares": g.shares[:2]})
    with pytest.raises(PlanError, match="the group has 3 plans for 2 shares"):
        msgspec.json.decode(data, type=GroupPlan)


def test_a_port_a_layer_sets_is_skipped_by_the_members_after_it() -> None:
    ms = (member("a", extra_args=("--port", "18081")), member("b"))
    g = plan_group(ms, hw_with()).unwrap()
    assert [p.port for p in g.plans] == [18081, 18082]
    clash = (member("a", extra_args=("--port", "18085")), member("b", port=18085))
    got = plan_group(clash, hw_with())
    assert isinstance(got, Failure) and isinstance(got.failure(), PortInUse)
    assert str(got.failure()) == "member a: port 18085 is already in use (set by caller)"


def test_admin_overrides_apply_per_member_by_its_id() -> None:
    cfg = Config(models={"chat": Override(args=("--ctx-size", "1024"))})
    g = plan_group(TRIO[:2], hw_with(), Constraints(overrides=cfg), facts=TRIO_FACTS[:2]).unwrap()
    chat, small = g.plans
    assert chat.args[-2:] == ("--ctx-size", "1024") and chat.memory is not None
    assert chat.memory.ctx == 1024
    assert "1024" not in small.args


def test_a_members_own_threads_are_kept_and_more_threads_than_cpus_is_said() -> None:
    ms = (member("a", threads=3), member("b"))
    fs = (facts(llama_135m(), "a"), facts(llama_135m(), "b"))
    g = plan_group(ms, hw_with(threads=4), facts=fs, cpus=(0, 1, 2, 3)).unwrap()
    a = g.plans[0].args
    assert a[a.index("--threads") + 1] == "3" and "--threads-batch" not in a
    assert g.shares[0].threads == 3 and g.shares[0].cpus == (0, 1)
    assert any(n.startswith("a: its own 3 threads run on 2 CPUs (0-1)") for n in g.notes)


@pytest.mark.slow
def test_each_planned_member_starts_on_the_real_executors_with_its_pinning(
    tiny_llama: Path, tiny_whisper: Path, llama_server: str, whisper_server: str
) -> None:
    """The flags a group plan adds (``--threads-batch``, ``--cpu-range``, ``--cpu-strict``)
    are accepted by the real llama-server, and ``--threads`` by whisper-server: every member
    becomes ready on its own port. Each is stopped before the next starts (`run`)."""
    import os

    from exedra_engine import plan_group_on_host, run

    hw = Hardware(
        cpu=CPU(threads=2, ram=8 << 30, available=4 << 30),
        executors=(
            ExecutorInfo(kind=Kind.LLAMA, path=llama_server),
            ExecutorInfo(kind=Kind.TRANSCRIBE, path=whisper_server),
        ),
    )
    ms = (
        GroupMember(spec=ModelSpec(id="a", path=str(tiny_llama), kind=Kind.LLAMA)),
        GroupMember(spec=ModelSpec(id="b", path=str(tiny_llama), kind=Kind.LLAMA)),
        GroupMember(spec=ModelSpec(id="asr", path=str(tiny_whisper), kind=Kind.TRANSCRIBE)),
    )
    g = plan_group_on_host(ms, hw).unwrap()
    cpus = sorted(os.sched_getaffinity(0))
    assert {c for s in g.shares for c in s.cpus} <= set(cpus)
    assert len({p.port for p in g.plans}) == 3
    for plan in g.plans:
        with run(plan) as inst:
            assert inst.endpoint.url == plan.url


def test_a_port_only_whisper_cannot_bind_moves_the_whisper_member_alone() -> None:
    # 18080 in TIME_WAIT: llama-server binds it (SO_REUSEADDR), whisper-server cannot.
    tw = {Kind.TRANSCRIBE: frozenset({18080, 18081})}
    alone = plan_group(TRIO[:1], hw_with(), facts=TRIO_FACTS[:1], kind_ports_in_use=tw).unwrap()
    g = plan_group(TRIO, hw_with(), facts=TRIO_FACTS, kind_ports_in_use=tw).unwrap()
    assert alone.shares[0].port == g.shares[0].port == 18080  # chat keeps its port
    assert [s.port for s in g.shares] == [18080, 18081, 18082]
    first = (member("asr", Kind.TRANSCRIBE), member("chat"))
    g = plan_group(first, hw_with(), facts=(TRIO_FACTS[2], TRIO_FACTS[0]),
                   kind_ports_in_use=tw).unwrap()  # fmt: skip
    assert [s.port for s in g.shares] == [18082, 18080]


def test_a_running_actuals_port_is_skipped() -> None:
    peak = Actual(peak_rss=1 << 30, port=18080)
    g = plan_group(TRIO[:1], hw_with(), facts=TRIO_FACTS[:1], running=(peak,)).unwrap()
    assert g.shares[0].port == 18081


@pytest.mark.parametrize(
    ("running", "said"),
    [
        ((Actual(peak_rss=-(2**62)),), "running[0]: peak_rss -4611686018427387904 is not"),
        ((Actual(planned_rss=2**62),), "running[0]: planned_rss"),
        ((Actual(port=70000),), "running[0]: port 70000 is not a TCP port"),
        (("chat",), "running[0]: expected a LaunchPlan or an Actual, not str"),
    ],
)
def test_running_executors_that_no_host_holds_are_refused(
    running: tuple[object, ...], said: str
) -> None:
    got = plan_group(TRIO[:1], hw_with(), facts=TRIO_FACTS[:1], running=running)  # type: ignore[arg-type]  # fmt: skip
    assert isinstance(got, Failure) and isinstance(got.failure(), PlanError)
    assert said in str(got.failure())


@pytest.mark.parametrize(
    ("cpus", "said"),
    [([], "cpus: no CPU ids"), ([-1, 5], "cpus: -1 is not a CPU id"), ([True], "cpus: True")],
)
def test_cpu_ids_that_are_none_or_no_ids_are_refused(cpus: list[int], said: str) -> None:
    for ms in (TRIO[:1], TRIO[:2]):
        got = plan_group(ms, hw_with(), facts=TRIO_FACTS[: len(ms)], cpus=cpus)
        assert isinstance(got, Failure) and isinstance(got.failure(), PlanError), got
        assert said in str(got.failure())


def test_a_members_own_executor_runs_it_and_the_others_keep_the_hosts() -> None:
    ms = (msgspec.structs.replace(TRIO[0], executor="/opt/llama/llama-server"), *TRIO[1:])
    g = plan_group(ms, hw_with(), facts=TRIO_FACTS).unwrap()
    assert [p.command for p in g.plans] == [
        "/opt/llama/llama-server",
        LLAMA_EXE.path,
        WHISPER_EXE.path,
    ]
    assert msgspec.json.decode(msgspec.json.encode(ms[0]), type=GroupMember) == ms[0]


def test_chat_keeps_its_port_alone_and_beside_a_whisper_member_when_a_port_is_in_time_wait() -> (
    None
):
    from exedra_engine._shell.group_plan import GroupRequest, explain_group_request
    from tests.memory_host import MemoryHost

    chat, asr = member("chat"), member("asr", Kind.TRANSCRIBE)
    # /proc/net/tcp: 18080 (0x46A0) in TIME_WAIT (06) after the last run's connections.
    row = "   0: 0100007F:46A0 0100007F:9C40 06 00000000:00000000 00:00000000 00000000 0 0 0"
    host = MemoryHost({"/proc/net/tcp": "  sl  local_address rem_address st\n" + row + "\n"})

    def ports(*ms: GroupMember) -> list[int]:
        req = GroupRequest(members=ms, hardware=hw_with())
        return [s.port for s in explain_group_request(req, host, explain=False).plan.shares]

    assert ports(chat) == [18080]
    assert ports(chat, asr) == [18080, 18081]
    assert ports(asr, chat) == [18081, 18080]  # only whisper-server skips the TIME_WAIT port
