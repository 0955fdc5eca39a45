"""Row 12: the memory plan of each llama-server this machine has, side by side in one run.

Builds: the project's own CPU build (scripts/install-executors.sh), the Vulkan build of ./dev
(EXEDRA_VULKAN_LLAMA_SERVER) with no device visible (its CPU path), and the same on Vulkan0
(lavapipe). Each with Gemma 3 270M at two contexts. Host: the default plan's resident estimate
(``exedra-engine plan --executor BINARY``, no --measure; its prompt cache budget left out),
which counts the build's extra weight copies from its own short load, cached
(`exedra_engine._shell.extra_buffers`), against VmHWM. CPU cells after a ~700-token chat
prompt; the Vulkan0 cells after the load only (lavapipe computes Gemma at about a token a
second, and the wheel dies in its first decode there). Device: the plan's reservation against
the executor's own breakdown at exit (self = model + context + compute).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

import msgspec

from bench.common import Row, executor, free_port, real_model, scored
from bench.goals import MEM_TOLERANCE, MiB
from bench.rows.memory import _estimate, _peak_after_chat, _vm_hwm, serving

N = 12
CTXS = (8192, 32768)
VULKAN_ENV = "GGML_VK_VISIBLE_DEVICES"

_DEVICE_ROW = re.compile(
    r"memory_breakdown_print: \|\s+- (\w+) \(.*?\)\s+\|\s+\d+ =\s+\d+ \+ \(\s*(\d+) ="
)


def _builds() -> list[tuple[str, Path, str]]:
    """(name, binary, GGML_VK_VISIBLE_DEVICES) for each build here."""
    out: list[tuple[str, Path, str]] = []
    own = executor("llama-server")
    if own is not None:
        out.append(("own CPU build", own, ""))
    vk = os.environ.get("EXEDRA_VULKAN_LLAMA_SERVER", "")
    if vk and os.access(vk, os.X_OK):
        out.append(("Vulkan build, CPU", Path(vk), "none"))  # an index no device has
        out.append(("Vulkan build, Vulkan0", Path(vk), "0"))
    return out


def _planned(binary: Path, model: Path, ctx: int, on_device: bool) -> tuple[Any, str]:
    """The default plan of this host for `binary` (``plan --json``, as a user gets it), and
    its memory note on the build's weight copies."""
    from exedra_engine import LaunchPlan
    from exedra_engine.cli import build_parser
    from exedra_engine.cli.plan.request import planned

    argv = ["plan", "--model", str(model), "--kind", "llama", "--no-config", "--ctx", str(ctx)]
    argv += ["--executor", str(binary), "--port", str(free_port())]
    if not on_device:
        argv.append("--no-gpu")
    _, e, _ = planned(build_parser(only="plan").parse_args(argv))
    note = next((m for m in e.memory if "weight" in m and ("copies" in m or "buffers" in m)), "")
    return msgspec.json.decode(msgspec.json.encode(e.plan), type=LaunchPlan), note


def _load_only(plan: Any, log_path: Path) -> tuple[int, str]:
    """Start, wait until ready, stop: VmHWM after the load and the log (breakdown at exit)."""
    with serving(plan, log_path) as (proc, _):
        peak = _vm_hwm(proc.pid)
    return peak, log_path.read_text(errors="replace")


def _err(ours: int | None, truth: int) -> float | None:
    return None if ours is None or not truth else (ours - truth) / truth


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.0f}%"


def run(tmp: Path, quick: bool) -> list[Row]:
    """Each build x Gemma at two contexts: host estimate vs VmHWM, device vs breakdown."""
    model = real_model()
    builds = _builds()
    cells: list[dict[str, Any]] = []
    if model is not None:
        for name, binary, vis in builds:
            on_device = vis == "0"
            saved = os.environ.get(VULKAN_ENV)
            os.environ[VULKAN_ENV] = vis
            try:
                for ctx in CTXS:
                    p, note = _planned(binary, model, ctx, on_device)
                    log_path = tmp / "build-matrix.log"
                    if on_device:
                        peak, log = _load_only(p, log_path)
                    else:
                        peak, _, _ = _peak_after_chat(p, ctx, log_path)
                        log = log_path.read_text(errors="replace")
                    est, _ = _estimate(p)
                    own = {m.group(1): int(m.group(2)) * MiB for m in _DEVICE_ROW.finditer(log)}
                    dev = p.memory.devices[0] if p.memory and p.memory.devices else None
                    if dev is not None:
                        # lavapipe's device memory is this process's memory: VmHWM holds it
                        # beside the host's; the host's own peak is the rest.
                        peak -= own.get(dev.name, 0)
                    cells.append(
                        {
                            "build": name,
                            "ctx": ctx,
                            "peak": peak,
                            "est": est,
                            "host_err": _err(est, peak),
                            "device": dev.name if dev else "",
                            "dev_planned": dev.reserved if dev else None,
                            "dev_own": own.get(dev.name, 0) if dev else 0,
                            "dev_err": _err(dev.reserved, own.get(dev.name, 0)) if dev else None,
                            "extra": note,
                        }
                    )
                    print(f"  build matrix: {name} ctx {ctx}: {note}", file=sys.stderr)
            finally:
                if saved is None:
                    os.environ.pop(VULKAN_ENV, None)
                else:
                    os.environ[VULKAN_ENV] = saved
    _print(cells)
    errs = [abs(e) for c in cells for e in (c["host_err"], c["dev_err"]) if e is not None]
    worst = max(errs, default=None)
    missed = sum(1 for e in errs if e > MEM_TOLERANCE)
    fig = (
        f"{len(cells)} cells, worst {_pct(worst)}, {missed} past 10%"
        if cells
        else "no build or no real model here"
    )
    return [
        scored(
            "build_matrix",
            what=f"memory by build: {len(builds)} builds x Gemma x {len(CTXS)} contexts",
            ours=fig,
            ref="VmHWM (host), the executor's breakdown (device)",
            figure=fig,
            data={"cells": cells, "missed": missed, "worst_err": worst},
        )
    ]


def _print(cells: list[dict[str, Any]]) -> None:
    print(
        "\nmemory by build (MiB): host est = the plan's resident estimate with the build's "
        "extra weight copies, peak = VmHWM\n(CPU: after a ~700-token prompt; Vulkan0: after "
        "the load, less the device's own figure: lavapipe's memory is the process's);\ndevice "
        "= the plan's reservation (dev.p) vs the executor's breakdown (dev: self = model + "
        "context + compute)"
    )
    cols = ("peak", "est", "err", "dev.p", "dev", "err")
    print(f"{'build':<24} {'ctx':>6} " + " ".join(f"{c:>6}" for c in cols))
    for c in cells:
        dp = "-" if c["dev_planned"] is None else f"{c['dev_planned'] / MiB:.0f}"
        do = f"{c['dev_own'] / MiB:.0f}" if c["dev_own"] else "-"
        print(
            f"{c['build']:<24} {c['ctx']:>6} {c['peak'] / MiB:>6.0f} "
            f"{(c['est'] or 0) / MiB:>6.0f} {_pct(c['host_err']):>6} {dp:>6} {do:>6} "
            f"{_pct(c['dev_err']):>6}"
        )
    print()
