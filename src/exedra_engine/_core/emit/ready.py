"""The plan's endpoint as emitted: its ready path (the profile's, under the plan's prefix) and
where its port and host came from. Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from exedra_engine._core.emit import names
from exedra_engine._core.emit.options import Origin
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.endpoint import env_dict
from exedra_engine._core.plan.launch_plan import LaunchPlan, read_with
from exedra_engine._core.plan.provenance import Source
from exedra_engine.errors import EmitError, EngineError


def ready_problem(p: ExecutorProfile, plan: LaunchPlan) -> str:
    """Why `plan.ready` is not the profile's ready path under the plan's own prefix ("" when
    it is): a tampered ``/v1/models`` answers while the model loads."""
    want = expected_ready(p, plan)
    if plan.ready != want:
        return (
            f"the plan's ready path {plan.ready!r} is not {want!r}, the profile's ready "
            "path under the prefix its argv and env set"
        )
    if not _URL_PATH.fullmatch(want):
        return f"the ready path {want!r} is not a plain URL path"
    return ""


_URL_PATH = re.compile(r"(/[A-Za-z0-9._~!$&'()*+,;=:@%-]*)+")


def expected_ready(p: ExecutorProfile, plan: LaunchPlan) -> str:
    """The ready path the executor serves for the plan's argv and env (its prefix flag,
    else its prefix variable, then the profile's path), as its reading has it."""
    try:
        return read_with(plan, p).ready
    except EngineError:  # an argv it refuses: what its env alone says
        prefix = env_dict(plan.env).get(p.ready_prefix_env, "") if p.ready_prefix_env else ""
        return prefix.rstrip("/") + p.ready_path


def check_plan(p: ExecutorProfile, plan: LaunchPlan) -> None:
    names.port(plan.port, "the plan's port")
    problem = ready_problem(p, plan)
    if problem:
        raise EmitError(problem)


READ_BACK: Final = "the plan's argv and env, read back as the executor reads them"
"""Why a plan field no layer is known to have set has its value."""


def setting_layer(sources: Sequence[Source], flag: str, var: str) -> str:
    """The layer that set the plan field of `flag` or its variable `var` ("" unknown): by the
    flag's key and the variable's name as the merge recorded them, whatever spelling
    (``--port``, ``-p``, ``--port=N``) the layer wrote."""
    return next((s.layer for s in reversed(sources) if s.key and s.key in (flag, var)), "")


def endpoint_origins(
    p: ExecutorProfile, plan: LaunchPlan, sources: Sequence[Source]
) -> tuple[Origin, ...]:
    ready = (
        f"plan.ready, the profile's {p.ready_path} under the plan's prefix: answers 200 only "
        "once the model is loaded (a models endpoint answers while loading)"
    )
    out = [Origin(field="ready path", value=plan.ready, source="plan", why=ready)]
    for field, value, flag, var in (
        ("port", str(plan.port), p.port_flag, p.port_env),
        ("host", plan.host, p.host_flag, p.host_env),
    ):
        layer = setting_layer(sources, flag, var)
        why = "" if layer else READ_BACK
        out.append(Origin(field=field, value=value, source="plan", why=why, layer=layer))
    return tuple(out)
