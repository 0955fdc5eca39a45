"""What the executor really did, beside what the plan said (issue 19 item 6). Pure."""

from __future__ import annotations

from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.memory.settings import MIB
from exedra_engine._core.plan.endpoint import env_dict, stoi
from exedra_engine._core.plan.launch_plan import LaunchPlan, read_with
from exedra_engine._core.struct import Value
from exedra_engine.errors import EngineError


class Actual(Value, frozen=True, kw_only=True):
    """Read from the running executor once it is ready."""

    ctx: int | None = None
    """The context it allocated (llama-server's ``/props``); None when it cannot say."""
    planned_ctx: int | None = None
    """The context the plan asked for; None when the plan leaves it to the executor."""
    peak_rss: int | None = None
    """The process group's peak resident memory so far, bytes (``VmHWM``)."""
    planned_rss: int | None = None
    """The plan's expected resident peak on the host, bytes (`LaunchPlan.memory`)."""
    warnings: tuple[str, ...] = ()
    """What differs from the plan, for people (the CLI prints these)."""
    port: int = 0
    """The port it listens on (0: not known); a group planned beside it skips it."""


def planned_ctx(plan: LaunchPlan, profile: ExecutorProfile) -> int | None:
    """The context `plan` sets: its memory plan's, else its context flag's or variable's
    value; None when it sets none (0 means "the model's own", also None)."""
    if plan.memory is not None and plan.memory.ctx > 0:
        return plan.memory.ctx
    if not profile.ctx_flag:
        return None
    value: str | None = None
    try:
        items = read_with(plan, profile).items
    except EngineError:  # an argv the executor refuses: what its env says
        items = ()
    for item in items:
        if item.key == profile.ctx_flag and item.values:
            value = item.values[-1]
    if value is None:
        flag = profile.flags.flags.get(profile.ctx_flag)
        env = env_dict(plan.env)
        value = next((env[n] for n in (flag.env if flag else ()) if n in env), None)
    n = stoi(value) if value is not None else None
    return n if n else None


def actual(
    plan: LaunchPlan, profile: ExecutorProfile, ctx: int | None, peak_rss: int | None
) -> Actual:
    """`Actual` from what was read, with a warning when the executor's fitter changed the
    context or the load's peak went past the plan's figure."""
    want = planned_ctx(plan, profile)
    rss_plan = plan.memory.host.total if plan.memory is not None else None
    warnings: list[str] = []
    if want is not None and ctx is not None and ctx != want:
        warnings.append(
            f"the executor runs with context {ctx} where the plan asked for {want} (its own "
            "fitting changed it); plan with --ctx to choose"
        )
    if rss_plan and peak_rss is not None and peak_rss > rss_plan:
        warnings.append(
            f"the executor's peak resident memory, {peak_rss / MIB:,.0f} MiB, is above the "
            f"plan's {rss_plan / MIB:,.0f} MiB"
        )
    return Actual(
        ctx=ctx,
        planned_ctx=want,
        peak_rss=peak_rss,
        planned_rss=rss_plan,
        warnings=tuple(warnings),
        port=plan.port,
    )
