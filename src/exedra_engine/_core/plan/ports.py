"""The plan's port: chosen (an explicit one, or the first free one from the base), where a
merged plan's port came from, and a scanned plan moved to another port."""

from __future__ import annotations

from collections.abc import Set

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.plan.launch_plan import LaunchPlan, edited, read_with
from exedra_engine._core.plan.layers import Merged
from exedra_engine._core.values import Constraints
from exedra_engine.constants import DEFAULT_PORT_BASE
from exedra_engine.errors import PlanError, PortInUse


def choose_port(c: Constraints, in_use: Set[int]) -> int:
    """The requested port, checked, or the first free one from the base."""
    if c.port:
        if not 0 < c.port < 65536:
            raise PlanError(f"port {c.port} is outside 1-65535")
        if c.port in in_use:
            raise PortInUse(f"port {c.port} is already in use (requested explicitly)")
        return c.port
    base = c.port_base or DEFAULT_PORT_BASE
    if not 0 < base < 65536:
        raise PlanError(f"port_base {base} is outside 1-65535")
    p = next_free_port(base, in_use)
    if p is None:
        raise PortInUse(f"no free port from {base} to 65535")
    return p


def next_free_port(base: int, in_use: Set[int]) -> int | None:
    """The first port from `base` up that is not in use, or None."""
    # (A loop, not next() of a generator: asked on every plan that scans for its port.)
    for p in range(base, 65536):
        if p not in in_use:
            return p
    return None


def port_origin(p: ExecutorProfile, m: Merged) -> str:
    """Which layer set the merged plan's port, for a refusal that names it."""
    # The port comes from the winning port flag, else from the port variable (the merge keeps
    # one form of a setting).
    for o in m.provenance:
        if o.key == p.port_flag or (p.port_env and o.key == p.port_env):
            via = f" via {p.port_env}" if o.said.what == "env" else ""
            return f"set by {o.said.layer}{via}"
    return "set by a layer above the engine"


def with_port(plan: LaunchPlan, port: int, *, executors: Executors = BUILTIN) -> LaunchPlan:
    """The same plan on another port: the winning ``--port`` value is rewritten and the
    endpoint read back again. Only for plans whose port the planner chose by scanning;
    raises `PlanError` for any other."""
    if not plan.port_scanned:
        raise PlanError(f"port {plan.port} was requested explicitly; it is never moved")
    profile = executors.profile(plan.spec.kind)
    args = list(plan.args)
    # The executor reads the last port flag; its value stands where the reader says.
    last = next(
        (
            it.value_at[0]
            for it in reversed(read_with(plan, profile).items)
            if it.key == profile.port_flag and it.values
        ),
        None,
    )
    if last is None:
        raise PlanError("the plan's args have no port flag to move")
    args[last] = str(port)
    moved = msgspec.structs.replace(plan, args=tuple(args))
    r = read_with(moved, profile).resolved()  # a new argv: read once, here
    # The views of a built-in kind's plan are its argv's already; an added kind's are set here
    # (and the reading just made goes with it).
    return edited(moved, host=r.host, port=r.port, api_key=r.api_key)
