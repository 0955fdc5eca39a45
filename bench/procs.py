"""Commands timed in subprocesses (rows 6 and 9): this tree's CLI, wall and CPU times."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from bench.common import ROOT
from bench.goals import HEAVY_IMPORTS


def cli_command() -> tuple[list[str], str]:
    """The console script of this interpreter's environment (what a user runs), else
    ``python -m exedra_engine``; `child_env` makes either import this tree."""
    exe = Path(sys.executable).parent / "exedra-engine"
    if exe.exists():
        return [str(exe)], "exedra-engine"
    return [sys.executable, "-m", "exedra_engine"], "python -m exedra_engine"


def child_env(tmp: Path) -> dict[str, str]:
    """The environment of every command timed in rows 6 and 9: this tree first on the path,
    and bytecode cached (in a private prefix, warmed by one untimed run of each command), as
    an installed package has it. PYTHONDONTWRITEBYTECODE would recompile every module of
    ours on every run: 5 ms for the flag data alone."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE",)}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    return env


def interleaved(
    cmds: dict[str, list[str]], n: int, env: dict[str, str]
) -> dict[str, list[float]] | str:
    """Wall times of each command, `n` rounds with the order alternating between rounds,
    after one untimed warm-up run of each; or the reason one of them fails."""
    for name, cmd in cmds.items():
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["no message"])[-1]
            return f"{name} exits {r.returncode}: {last[:120]}"
    out: dict[str, list[float]] = {name: [] for name in cmds}
    order = list(cmds)
    for i in range(n):
        for name in order if i % 2 == 0 else order[::-1]:
            t = time.perf_counter()
            subprocess.run(cmds[name], env=env, stdout=subprocess.DEVNULL, check=True)
            out[name].append(time.perf_counter() - t)
    return out


def cpu_times(cmds: dict[str, list[str]], n: int, env: dict[str, str]) -> dict[str, list[float]]:
    """User + system CPU seconds of each command (from wait4), `n` alternating rounds: on a
    shared machine the processor time a start-up costs is far steadier than its wall time,
    which includes every wait for a core another process holds."""
    out: dict[str, list[float]] = {name: [] for name in cmds}
    order = list(cmds)
    for i in range(n):
        for name in order if i % 2 == 0 else order[::-1]:
            p = subprocess.Popen(cmds[name], env=env, stdout=subprocess.DEVNULL)
            _, _, usage = os.wait4(p.pid, 0)
            out[name].append(usage.ru_utime + usage.ru_stime)
    return out


HEAVY = HEAVY_IMPORTS


def imported(cmd: list[str], env: dict[str, str]) -> list[str]:
    """Which of `HEAVY` the command imports (read from its -X importtime report)."""
    r = subprocess.run(
        cmd, env={**env, "PYTHONPROFILEIMPORTTIME": "1"}, capture_output=True, text=True, check=True
    )
    names = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if "|" in line}
    return sorted(m for m in HEAVY if m in names)
