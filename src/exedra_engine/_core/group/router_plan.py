"""The plan of a group's llama.cpp router, made as every plan is: its flags a layer, one
merge (which keeps the key in the environment and refuses what cannot reach the executor),
its endpoint read from that merge, its port checked against the members beside it."""

from __future__ import annotations

from collections.abc import Sequence

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.values import GroupPlan
from exedra_engine._core.plan.endpoint import resolve_merged
from exedra_engine._core.plan.engine_args import RANK_ENGINE
from exedra_engine._core.plan.launch_plan import LaunchPlan, merge_reading, remember
from exedra_engine._core.plan.layer_checks import Layer
from exedra_engine._core.plan.layers import merge
from exedra_engine._core.values import ModelSpec
from exedra_engine.errors import PortInUse


def plan_router(
    group: GroupPlan,
    preset_path: str,
    members: Sequence[str],
    models_max: int,
    *,
    executors: Executors = BUILTIN,
) -> LaunchPlan:
    """One llama-server in router mode on the first of `members`' host and port (those
    members are its models, in the preset at `preset_path`, at most `models_max` loaded),
    ready when ``/models`` answers; its API key, if any, is the first member's, passed in
    the environment (the router then guards ``/models`` with it, and is ready when
    ``/health`` answers). Raises `PortInUse` when a member the router does not serve
    listens on that port."""
    first = group.plan_of(members[0])
    llama = executors.profile("llama")
    layer = Layer(
        name="router",
        rank=RANK_ENGINE,
        args=(
            llama.router_preset_flag,
            preset_path,
            llama.router_max_flag,
            str(models_max),
            llama.host_flag,
            first.host,
            llama.port_flag,
            str(first.port),
        ),
        env=((llama.key_env, first.api_key),) if first.api_key else (),
    )
    m = merge(llama, [layer], required_key=first.api_key, executors=executors)
    reading = merge_reading(llama, m, resolve_merged(llama, m.args, m.settings, m.env_map), None)
    r = reading.endpoint
    served = set(members)
    beside = [p.spec.id for p in group.plans if p.port == r.port and p.spec.id not in served]
    if beside:
        raise PortInUse(
            f"the router would listen on port {r.port}, where member {beside[0]} listens"
        )
    remember(llama, reading)  # the plan's views are read from it
    plan = LaunchPlan(
        spec=ModelSpec(id="router", path=preset_path, kind=first.spec.kind),
        command=first.command,
        args=m.args,
        env=m.env,
        host=r.host,
        port=r.port,
        api_key=r.api_key,
        ready=llama.ready_path if r.api_key else llama.router_ready_path,
    )
    return plan
