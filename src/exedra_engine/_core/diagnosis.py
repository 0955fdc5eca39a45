"""Why a launch failed, in words, from plain values: the exit, the log tail. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

SIGILL_HINT: Final = (
    ": this binary was built for CPU instructions this machine lacks; rebuild it with "
    "ggml's runtime CPU dispatch (GGML_BACKEND_DL=ON, GGML_CPU_ALL_VARIANTS=ON), as "
    "scripts/install-executors.sh does"
)


def exited_early(command: str, how: str, sigill: bool, tail: Sequence[str]) -> str:
    """The executor ended (`how`: ``exit 1``) before its ready path answered."""
    shown = "\n".join(tail[-8:])
    return f"{command} exited before it was ready ({how}){SIGILL_HINT if sigill else ''}" + (
        f"; last log lines:\n{shown}" if shown else ""
    )


def timed_out(command: str, path: str, url: str, budget: float, tail: Sequence[str]) -> str:
    """The ready path did not answer within the budget."""
    shown = "\n".join(tail[-5:])
    return f"{command} did not answer {path} on {url} within {budget:g} s" + (
        f"; last log lines:\n{shown}" if shown else ""
    )
