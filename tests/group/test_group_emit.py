"""A group plan emitted for systemd, Quadlet and Kubernetes: one unit or Deployment and
Service per member with its share (CPU set, memory, threads), tied together by a target;
every file passes the validators `emit` passes today."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from exedra_engine import EmitOptions
from exedra_engine._core.emit.formats.ini import read_ini, setting
from exedra_engine._core.emit.group.llama_swap import (
    SCHEMA_FIELDS,
    dump,
    fitting_groups,
    llama_swap_config,
)
from exedra_engine._core.emit.group.units import cpu_list, emit_group_files
from exedra_engine._core.group.values import GroupPlan, MemberShare
from exedra_engine._core.targets import Target
from exedra_engine.errors import EmitError
from tests.emit.test_emit_deploy import (
    MIB,
    _plan,
    fake_binary,
    kubernetes_validate,
    needs_systemd,
    systemd_verify,
    with_memory,
)

GIB = 1024 * MIB


def _group(command: str = "") -> GroupPlan:
    """Two llama members on a 4-CPU host: 2 CPUs and 3 GiB (planned peak 2 GiB) each."""
    plans = []
    for i, name in enumerate(("chat", "embed")):
        p = _plan(id_=name, extra_args=("--threads", "2", "--port", str(8080 + i)))
        p = with_memory(p, 2 * GIB)
        plans.append(msgspec.structs.replace(p, command=command) if command else p)
    shares = (
        MemberShare(id="chat", port=8080, memory=3 * GIB, cpus=(0, 1), threads=2),
        MemberShare(id="embed", port=8081, memory=3 * GIB, cpus=(2, 3), threads=2),
    )
    return GroupPlan(plans=tuple(plans), shares=shares, budget=6 * GIB)


def _emit(target: Target, group: GroupPlan | None = None, **opts: Any) -> dict[str, str]:
    return emit_group_files(group or _group(), target, EmitOptions(name="llm", **opts)).files


def test_cpu_lists_are_ranges() -> None:
    assert cpu_list((3, 0, 1, 2, 6), " ") == "0-3 6"
    assert cpu_list((5,), ",") == "5"


def test_systemd_units_carry_each_share_and_one_target_ties_them() -> None:
    files = _emit(Target.SYSTEMD, waiter=sys.executable)
    assert sorted(files) == ["llm-chat.service", "llm-embed.service", "llm.target"]
    target = read_ini(files["llm.target"])
    assert setting(target, "Unit", "Wants") == ["llm-chat.service llm-embed.service"]
    for name, cpus in (("llm-chat.service", "0-1"), ("llm-embed.service", "2-3")):
        unit = read_ini(files[name])
        assert setting(unit, "Unit", "PartOf") == ["llm.target"]
        assert setting(unit, "Install", "WantedBy") == ["llm.target"]
        assert setting(unit, "Service", "CPUAffinity") == [cpus]
        assert setting(unit, "Service", "MemoryMax") == ["3072M"]
        # Halfway between the planned peak (2 GiB) and the share (3 GiB).
        assert setting(unit, "Service", "MemoryHigh") == ["2560M"]
        assert '"--threads" "2"' in setting(unit, "Service", "ExecStart")[0]


def test_quadlet_containers_carry_each_share_and_one_target_ties_them() -> None:
    files = _emit(Target.QUADLET)
    assert sorted(files) == ["llm-chat.container", "llm-embed.container", "llm.target"]
    unit = read_ini(files["llm-embed.container"])
    assert setting(unit, "Container", "PodmanArgs") == ["--cpuset-cpus=2-3"]
    assert setting(unit, "Container", "Memory") == ["3072m"]
    assert setting(unit, "Unit", "PartOf") == ["llm.target"]
    assert setting(unit, "Install", "WantedBy") == ["llm.target"]


def test_kubernetes_gets_a_deployment_and_service_per_member_with_the_shares() -> None:
    files = _emit(Target.K8S)
    assert sorted(files) == ["llm-chat.yaml", "llm-embed.yaml"]
    for name in files:
        docs = [d for d in yaml.safe_load_all(files[name]) if d]
        assert [d["kind"] for d in docs] == ["Deployment", "Service"]
        (c,) = docs[0]["spec"]["template"]["spec"]["containers"]
        # The request is the planned peak (2 GiB), the limit the share (3 GiB).
        assert c["resources"]["requests"] == {"memory": "2048Mi", "cpu": "2"}
        assert c["resources"]["limits"]["cpu"] == "2"
        # Never below the single plan's limit (peak + margin, here 2458 MiB).
        assert c["resources"]["limits"]["memory"] == "3072Mi"


def test_a_share_below_the_planned_peak_is_refused_naming_the_member() -> None:
    group = _group()
    small = msgspec.structs.replace(group.shares[1], memory=1 * GIB)
    group = msgspec.structs.replace(group, shares=(group.shares[0], small))
    with pytest.raises(EmitError, match=r"member embed: .*MemoryMax"):
        _emit(Target.SYSTEMD, group)


@needs_systemd
def test_group_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    files = _emit(Target.SYSTEMD, _group(fake_binary(tmp_path)), waiter=sys.executable)
    for name, text in files.items():
        assert systemd_verify(text, tmp_path, name) == "", name


def test_group_manifests_pass_kubernetes_validate_strict(tmp_path: Path) -> None:
    paths = []
    for name, text in _emit(Target.K8S, namespace="llm").items():
        paths.append(tmp_path / name)
        paths[-1].write_text(text)
    assert kubernetes_validate(paths) == ""


# -- llama-swap --------------------------------------------------------------------------------


def _sized_group(sizes_gib: tuple[int, ...], budget_gib: int) -> GroupPlan:
    plans, shares = [], []
    for i, size in enumerate(sizes_gib):
        name = f"m{i}"
        p = with_memory(_plan(id_=name, extra_args=("--port", str(8080 + i))), size * GIB)
        plans.append(p)
        shares.append(MemberShare(id=name, port=8080 + i, memory=size * GIB))
    return GroupPlan(plans=tuple(plans), shares=tuple(shares), budget=budget_gib * GIB)


def test_llama_swap_groups_hold_what_fits_together_largest_first() -> None:
    # Budget 10: 6 and 4 fit (the largest first), then 5 and 3 and 2 together.
    groups = fitting_groups(_sized_group((5, 6, 3, 4, 2), 10))
    assert groups == [["m1", "m3"], ["m0", "m2", "m4"]]
    # An unknown budget bounds nothing: one group.
    assert fitting_groups(_sized_group((5, 6), 0)) == [["m0", "m1"]]


def test_llama_swap_config_uses_only_its_schemas_fields_and_starts_each_plan() -> None:
    group = _sized_group((3, 2), 4)
    config = yaml.safe_load(dump(llama_swap_config(group, start_budget=30)))
    assert set(config) <= SCHEMA_FIELDS[""]
    assert config["healthCheckTimeout"] == 30
    for name, model in config["models"].items():
        assert set(model) <= SCHEMA_FIELDS["model"] and "cmd" in model
        plan = group.plan_of(name)
        assert shlex.split(model["cmd"]) == [plan.command, *plan.args]
        assert model["proxy"] == plan.url and model["checkEndpoint"] == "/health"
    for g in config["groups"].values():
        assert set(g) <= SCHEMA_FIELDS["group"] and g["swap"] is False and g["exclusive"]
    members = [m for g in config["groups"].values() for m in g["members"]]
    assert sorted(members) == ["m0", "m1"]  # each model in exactly one group


def test_llama_swap_refuses_a_plan_with_a_key() -> None:
    keyed = _plan(id_="k", api_key="k-swap-secret", extra_args=("--port", "8080"))
    group = GroupPlan(plans=(keyed,), shares=(MemberShare(id="k", port=8080),))
    with pytest.raises(EmitError, match="member k: its plan has an API key"):
        llama_swap_config(group)
