"""The phase a signal ends, for the commands that run executors under trio (see
cli/launch/__init__.py for the phases)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from exedra_engine.cli.signals import SIGNALS, Signals


@asynccontextmanager
async def signal_watch(sigs: Signals) -> AsyncIterator[tuple[trio.Nursery, trio.CancelScope]]:
    """A nursery, and a cancel scope that the first SIGINT or SIGTERM (recorded in `sigs`)
    cancels, also one that came before (between planning and here); later signals are
    consumed (`Signals.cancel_on`), since the stop under way is already bounded. Enter the
    scope around the phase a signal ends; the nursery runs what outlives it (an executor)."""
    with trio.open_signal_receiver(*SIGNALS) as signals:
        async with trio.open_nursery() as nursery:
            phase = trio.CancelScope()
            nursery.start_soon(sigs.cancel_on, signals, phase)
            if sigs.first is not None:
                phase.cancel()
            yield nursery, phase


@asynccontextmanager
async def signal_phase(sigs: Signals) -> AsyncIterator[trio.CancelScope]:
    """`signal_watch`'s cancel scope alone, the watch ended with it; what the phase raises
    is raised after the nursery, as itself: raised inside it, trio would wrap it in an
    ExceptionGroup the command's error table does not match."""
    raised: BaseException | None = None
    async with signal_watch(sigs) as (nursery, phase):
        try:
            yield phase
        except BaseException as e:
            raised = e
        finally:
            nursery.cancel_scope.cancel()
    if raised is not None:
        raise raised
