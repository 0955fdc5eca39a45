"""Row 6: the CLI's cold start (plan --json), against `python -c pass`, beside its floor:
`python -c "import msgspec"` (the one library every plan needs), and the project's own share
above that floor."""

from __future__ import annotations

import sys
from pathlib import Path

from bench.common import Row, med, ms, scored
from bench.goals import CLI_EXTRA_S
from bench.procs import child_env, cli_command, cpu_times, imported, interleaved

N = 6


def run(tmp: Path, quick: bool) -> list[Row]:
    cli, label = cli_command()
    cmd = [
        *cli,
        "plan",
        "--model",
        str(tmp / "absent.gguf"),
        "--kind",
        "llama",
        # No --config: the default directory, absent on most hosts (the common case); a
        # named path must exist since the command line checks it at parse.
        "--executor",
        "/usr/bin/true",
        "--json",
    ]
    env = child_env(tmp)
    n = 20 if quick else 40
    cmds = {
        "ours": cmd,
        "ref": [sys.executable, "-c", "pass"],
        "floor": [sys.executable, "-c", "import msgspec"],
    }
    times = interleaved(cmds, n, env)
    if isinstance(times, str):
        return [
            Row(
                n=6,
                what="CLI cold start: plan --json",
                ours="not measurable",
                ref=times,
                figure="-",
                goal="-",
                met=False,
                data={},
            )
        ]
    ours, ref, floor = times["ours"], times["ref"], times["floor"]
    heavy = imported(cmd, env)
    extra = med(ours) - med(ref)
    cpu = cpu_times(cmds, n, env)
    cpu_extra = med(cpu["ours"]) - med(cpu["ref"])
    floor_extra = med(cpu["floor"]) - med(cpu["ref"])
    own = med(cpu["ours"]) - med(cpu["floor"])
    goal = CLI_EXTRA_S
    return [
        scored(
            "cli_start",
            what=f"CLI cold start: {label} plan --json, no config",
            ours=f"{ms(med(ours))} (cpu {ms(med(cpu['ours']))})",
            ref=(
                f"python -c pass {ms(med(ref))} (cpu {ms(med(cpu['ref']))}); floor "
                f"'import msgspec' cpu +{ms(floor_extra)}; {n} runs each"
            ),
            figure=(
                f"+{ms(extra)} (cpu +{ms(cpu_extra)}: floor +{ms(floor_extra)}, "
                f"ours +{ms(own)}), {extra / goal:.2f}x the goal"
            ),
            data={
                "floor_s": med(floor),
                "cpu_floor_s": med(cpu["floor"]),
                "cpu_floor_extra_s": floor_extra,
                "cpu_own_s": own,
                "ours_s": med(ours),
                "ref_s": med(ref),
                "extra_s": extra,
                "cpu_s": med(cpu["ours"]),
                "cpu_ref_s": med(cpu["ref"]),
                "cpu_extra_s": cpu_extra,
                "goal_s": goal,
                "runs": n,
                "heavy_imports": heavy,
            },
        )
    ]
