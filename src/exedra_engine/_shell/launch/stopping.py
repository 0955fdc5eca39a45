"""Carrying out the stop steps of `exedra_engine._core.launch.stop` over an adapter's
primitives, and waiting for a process tree to be gone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from exedra_engine._core.launch.stop import Send, Step
from exedra_engine._shell.launch.loop import Event, Loop
from exedra_engine._shell.launch.tree import ProcessTree


async def run_stop(
    steps: tuple[Step, ...],
    send: Callable[[str], None],
    exit_within: Callable[[float], Awaitable[bool]],
) -> None:
    """Carry out `steps`: `send` each signal (by name); for each wait, `exit_within(s)`
    says whether the exit came within ``s`` seconds, which ends the sequence. The caller
    shields this from its own cancellation (each adapter has its way)."""
    for step in steps:
        if isinstance(step, Send):
            send(step.signal)
        elif await exit_within(step.seconds):
            return


async def tree_gone(tree: ProcessTree, loop: Loop) -> bool:
    """Return (True) once no process of `tree` is left: polled, backing off, since a group
    has no pidfd and each poll walks /proc."""
    delay = 0.001
    while tree.alive():
        await loop.sleep(delay)
        delay = min(delay * 2, 0.02)
    return True


async def set_within(loop: Loop, seconds: float, event: Event) -> bool:
    """Whether `event` (a `loop.Event`) is set within `seconds`."""

    async def wait() -> bool:
        await event.wait()
        return True

    return await loop.within(seconds, wait()) is not None
