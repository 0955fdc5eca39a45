"""Running the stop sequence of `exedra_engine._core.launch.stop` in trio."""

from __future__ import annotations

import math
import signal
from collections.abc import Awaitable, Callable

import trio

from exedra_engine._core.launch.stop import Step, stop_steps
from exedra_engine._shell import drive
from exedra_engine._shell.launch.tree import ProcessTree


async def run_steps(
    steps: tuple[Step, ...], send: Callable[[str], None], exited: Callable[[], Awaitable[object]]
) -> None:
    """Carry out `steps`: `send` each signal (by name), and wait on `exited` for each wait;
    the first exit within a wait ends the sequence (`drive.run_stop`, with trio's
    deadline). Not shielded: a `deliver_cancel` is cancelled once the exit comes; `stop`
    shields its own call."""

    async def within(seconds: float) -> bool:
        with trio.move_on_after(seconds):
            await exited()
            return True
        return False

    await drive.run_stop(steps, send, within)


async def terminate(
    send: Callable[[int], None],
    exited: Callable[[], Awaitable[object]],
    grace: float,
    *,
    term: bool = True,
    kill_wait: float = math.inf,
) -> None:
    """The default stop policy on plain callables (numbered signals): SIGTERM, wait up to
    `grace` seconds for `exited`, then SIGKILL and wait up to `kill_wait`. `term` off skips
    straight to the grace wait (SIGTERM already sent)."""
    sent = frozenset() if term else frozenset({"SIGTERM"})
    steps = stop_steps(grace, sent=sent, kill_wait=kill_wait)
    with trio.CancelScope(shield=True):
        await run_steps(steps, lambda name: send(signal.Signals[name]), exited)


async def tree_gone(tree: ProcessTree) -> None:
    """Return once no process of `tree` is left (polled: a group has no pidfd)."""
    await drive.tree_gone(tree, trio.sleep)
