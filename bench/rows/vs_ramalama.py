"""Row 9: plan --json on the real model, against RamaLama's dry run."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from bench.common import Row, executor, med, ms, not_measurable, real_model, scored
from bench.goals import GOALS
from bench.procs import child_env, cli_command, interleaved

N = 9


def run(tmp: Path, quick: bool) -> list[Row]:
    """`exedra-engine plan --json` on the real model (its header read, the port scanned) next
    to RamaLama printing its command for the same model (it reads no header)."""
    what = "plan --json vs ramalama --dryrun serve, real model"
    goal = GOALS["vs_ramalama"].text
    model = real_model()
    rama = Path(sys.executable).parent / "ramalama"
    if not rama.exists():
        found = shutil.which("ramalama")
        rama = Path(found) if found else rama
    if model is None:
        why = "model missing: run scripts/fetch_model.py"
        return [not_measurable(9, what, why, goal)]
    if not rama.exists():
        why = "ramalama not installed: pip install -e '.[bench]'"
        return [not_measurable(9, what, why, goal)]
    binary = executor("llama-server")
    cli, label = cli_command()
    ours_cmd = [
        *cli,
        "plan",
        "--model",
        str(model),
        "--kind",
        "llama",
        "--executor",
        str(binary) if binary else "/usr/bin/true",
        "--json",
    ]
    ref_cmd = [str(rama), "--dryrun", "--nocontainer", "serve", str(model)]
    env = child_env(tmp)
    n = 20 if quick else 30
    times = interleaved({"exedra-engine": ours_cmd, "ramalama": ref_cmd}, n, env)
    if isinstance(times, str):
        return [not_measurable(9, what, times, goal)]
    ours, ref = times["exedra-engine"], times["ramalama"]
    ratio = med(ref) / med(ours)
    return [
        scored(
            "vs_ramalama",
            what=what,
            ours=ms(med(ours)),
            ref=f"ramalama {ms(med(ref))} ({n} runs each)",
            figure=f"{ratio:.2f}x faster",
            data={
                "ours_s": med(ours),
                "ref_s": med(ref),
                "ratio": ratio,
                "runs": n,
                "executor": str(binary) if binary else "/usr/bin/true (llama-server not found)",
                "cli": label,
            },
        )
    ]
