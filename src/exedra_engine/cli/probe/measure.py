"""``plan --measure`` and ``probe --measure MODEL...``: the engine's own memory figures
(``llama-fit-params``), measured on this machine and put into the hardware the planner reads.

``plan --measure`` plans once to learn the plan's flags, measures them, and plans again with
the measurement in `Hardware.measurements`, so the plan's memory is the engine's own answer.
``probe --json --measure MODEL`` stores measurements in the host file, so that ``plan
--hardware host.json`` on another machine uses the target's own figures (a plan finds the
one made for its model and memory flags: `exedra_engine._core.memory.fit_params.measurement_for`).
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from exedra_engine._core.executors.kinds import Kind
from exedra_engine._core.memory.fit_params import FitMeasurement, FitRow
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.values import Constraints, Hardware, ModelSpec
from exedra_engine.cli.render import shown


def measured_hardware(hw: Hardware, plan: LaunchPlan) -> Hardware:
    """`hw` with the measurement of `plan` (made here, now) appended; raises `MeasureError`."""
    from exedra_engine._shell.measure import measured

    m = measured(plan, host_free=hw.cpu.available)
    return msgspec.structs.replace(hw, measurements=(*hw.measurements, m))


def measured_host(
    hw: Hardware, models: Sequence[str], ctxs: Sequence[int], args: Sequence[str]
) -> Hardware:
    """`hw` with a measurement of each model at each context (the model's own when `ctxs`
    is empty), each with the plan this host would make for it plus `args`; raises the
    `EngineError` of a plan or a measurement that cannot be made."""
    from exedra_engine._shell.measure import measured
    from exedra_engine._shell.plan import PlanRequest, explain_request

    found: list[FitMeasurement] = []
    for model in models:
        for ctx in ctxs or (0,):
            req = PlanRequest(
                spec=ModelSpec(path=model, kind=Kind.LLAMA),
                hardware=hw,
                constraints=Constraints(ctx=ctx, extra_args=tuple(args)),
                check_ports=False,  # the ports in use here say nothing about memory
            )
            found.append(measured(explain_request(req).plan, host_free=hw.cpu.available))
    return msgspec.structs.replace(hw, measurements=(*hw.measurements, *found))


def measurement_lines(ms: Sequence[FitMeasurement]) -> list[str]:
    """One line per measurement and place, for ``probe``'s text."""
    lines = []
    for m in ms:
        flags = " ".join(m.args)
        lines.append(f"measured   {shown(m.model)}  ctx {m.ctx}  ({shown(flags)})")
        lines.extend(f"             {_row(r)}" for r in (*m.devices, m.host))
    return lines


def _row(r: FitRow) -> str:
    mib = 1 << 20
    free = f", {r.free // mib} MiB free" if r.free else ""
    return (
        f"{shown(r.name):<8} {r.total // mib} MiB = model {r.model // mib} + context "
        f"{r.context // mib} + compute {r.compute // mib}{free}"
    )
