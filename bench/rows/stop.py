"""Row 5: stop() on the fake executor: graceful exit, and SIGKILL at the deadline."""

from __future__ import annotations

import os
import time
from pathlib import Path

from bench.common import Row, fake_plan, med, ms, scored

N = 5


def run(tmp: Path, quick: bool) -> list[Row]:
    import trio

    from exedra_engine import launch

    n = 8 if quick else 25
    after_exit: list[float] = []
    ef = tmp / "exit"

    async def graceful() -> None:
        os.environ["FAKE_EXIT_FILE"] = str(ef)
        async with trio.open_nursery() as nursery:
            inst = (await launch(nursery, fake_plan(25100))).unwrap()
            await trio.sleep(0.06)
            await inst.stop()
            after_exit.append(time.monotonic() - float(ef.read_text()))

    for _ in range(n):
        trio.run(graceful)
    os.environ.pop("FAKE_EXIT_FILE", None)
    late: list[float] = []
    timeout = 0.2

    async def stubborn() -> None:
        os.environ["FAKE_MODE"] = "ignore-term"
        async with trio.open_nursery() as nursery:
            inst = (await launch(nursery, fake_plan(25200))).unwrap()
            await trio.sleep(0.06)
            t = time.monotonic()
            await inst.stop(timeout)
            late.append(time.monotonic() - t - timeout)

    for _ in range(max(4, n // 3)):
        trio.run(stubborn)
    os.environ.pop("FAKE_MODE", None)
    return [
        scored(
            "stop_exit",
            what="stop: process exit to stop() returning",
            ours=f"p50 {ms(med(after_exit))}",
            ref="-",
            figure=ms(med(after_exit)),
            data={"p50_s": med(after_exit)},
        ),
        scored(
            "stop_kill",
            what="stop: SIGTERM ignored, deadline to exit observed",
            ours=f"max {ms(max(late))}",
            ref="-",
            figure=ms(max(late)),
            data={"max_s": max(late), "p50_s": med(late)},
        ),
    ]
