"""Row 3: readiness detection on the fake executor, against fixed-interval pollers."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from bench.common import FAKE, Row, fake_plan, free_port, med, ms, pct, poll_fixed, scored

N = 3


def run(tmp: Path, quick: bool) -> list[Row]:
    import trio

    from exedra_engine import open_instance

    n = 8 if quick else 25
    ours: list[float] = []
    rf = tmp / "ready"

    async def one(i: int) -> None:
        env = {"FAKE_READY_AFTER": str(0.15 + 0.037 * (i % 7)), "FAKE_READY_FILE": str(rf)}
        os.environ.update(env)
        async with open_instance(fake_plan(25000)) as inst:
            t = time.monotonic()
            ours.append(t - float(rf.read_text()))
            del inst

    for i in range(n):
        trio.run(one, i)
    refs: dict[str, list[float]] = {}
    for label, interval in (("250 ms", 0.25), ("1 s", 1.0)):
        lat = []
        for i in range(max(4, n // 3)):
            os.environ["FAKE_READY_AFTER"] = str(0.15 + 0.037 * (i % 7))
            port = free_port()
            proc = subprocess.Popen(
                [str(FAKE), "--port", str(port)], env=os.environ.copy(), stderr=subprocess.DEVNULL
            )
            try:
                t = poll_fixed(f"http://127.0.0.1:{port}/health", interval, time.monotonic() + 10)
                lat.append(t - float(rf.read_text()))
            finally:
                proc.terminate()
                proc.wait()
        refs[label] = lat
    for k in ("FAKE_READY_AFTER", "FAKE_READY_FILE"):
        os.environ.pop(k, None)
    p50, p99 = med(ours), pct(ours, 0.99)
    ref_txt = ", ".join(f"{k} poller p50 {ms(med(v))}" for k, v in refs.items())
    return [
        scored(
            "readiness",
            what=f"readiness detection, fake executor ({n} launches)",
            ours=f"p50 {ms(p50)}, p99 {ms(p99)}",
            ref=ref_txt,
            figure=f"{med(refs['250 ms']) / p50:.0f}x sooner than 250 ms polling",
            data={
                "p50_s": p50,
                "p99_s": p99,
                **{f"ref_{k}_p50_s": med(v) for k, v in refs.items()},
            },
        )
    ]
