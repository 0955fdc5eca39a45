"""The stop sequence as data (trio's ``deliver_cancel`` idea, with one default). Pure.

An adapter runs the steps in order: a `Send` signals the executor's process group, a `Wait`
waits that long for the exit and ends the sequence early when the exit comes. Signals are
named, not numbered, so the core needs no `signal` module.

Exactly one SIGTERM per executor: llama-server exits at once with status 1 on a second
SIGINT/SIGTERM (checked with the binary), which would turn a graceful stop into a crash.
So a sequence is built knowing what was already sent, and never repeats SIGTERM.
"""

from __future__ import annotations

import math
from typing import Final

from exedra_engine._core.struct import Value

TERM: Final = "SIGTERM"
KILL: Final = "SIGKILL"

SETTLE: Final = 0.05
"""llama-server installs its SIGTERM handler after /health turns 200 and arms its main loop
just after that; a SIGTERM in between is lost (the loop starts anyway) and the executor then
runs until SIGKILL. A stop that comes this soon after readiness waits out the window."""

GROUP_KILL_WAIT: Final = 1.0
"""After SIGKILL to what is left of a group whose leader has exited: a process stuck in D
state, or a zombie nobody reaps, must not hold the stop for ever."""


class Send(Value, frozen=True, kw_only=True):
    """Send `signal` (a name: ``SIGTERM``) to the executor's process group."""

    signal: str


class Wait(Value, frozen=True, kw_only=True):
    """Wait up to `seconds` for the exit; the sequence ends when it comes."""

    seconds: float


Step = Send | Wait


def stop_steps(
    grace: float, *, sent: frozenset[str] = frozenset(), kill_wait: float = math.inf
) -> tuple[Step, ...]:
    """SIGTERM (unless already `sent`), `grace` seconds for the exit, then SIGKILL and up to
    `kill_wait` seconds. No grace: SIGKILL at once (a launch that failed served nobody)."""
    steps: list[Step] = []
    if grace > 0:
        if TERM not in sent:
            steps.append(Send(signal=TERM))
        steps.append(Wait(seconds=grace))
    steps += [Send(signal=KILL), Wait(seconds=kill_wait)]
    return tuple(steps)


def settle_left(ready_at: float | None, now: float) -> float:
    """Seconds a stop waits before its SIGTERM, so that it is not lost (`SETTLE`)."""
    if ready_at is None:
        return 0.0
    return max(0.0, ready_at + SETTLE - now)


def should_send(signal: str, sent: frozenset[str]) -> bool:
    """Whether `signal` may go out now, given the signals already sent: SIGTERM once."""
    return not (signal == TERM and TERM in sent)
