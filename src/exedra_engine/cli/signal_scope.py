"""The phase a signal ends, for the commands that run executors under trio (see
cli/launch.py for the phases)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from exedra_engine.cli.signals import SIGNALS, Signals


@asynccontextmanager
async def signal_phase(sigs: Signals) -> AsyncIterator[trio.CancelScope]:
    """A cancel scope that the first SIGINT or SIGTERM (recorded in `sigs`) cancels, also
    one that came before (between planning and here); later signals are consumed, since the
    stop under way is already bounded. Enter the scope around the phase a signal ends."""
    raised: BaseException | None = None
    with trio.open_signal_receiver(*SIGNALS) as signals:
        async with trio.open_nursery() as nursery:
            phase = trio.CancelScope()

            async def watch() -> None:
                async for signum in signals:
                    if sigs.first is None:
                        sigs.first = signum
                    phase.cancel()

            nursery.start_soon(watch)
            if sigs.first is not None:
                phase.cancel()
            try:
                yield phase
            except BaseException as e:
                # Raised after the nursery, as itself: raised inside it, trio would wrap it
                # in an ExceptionGroup the command's error table does not match.
                raised = e
            finally:
                nursery.cancel_scope.cancel()
    if raised is not None:
        raise raised
