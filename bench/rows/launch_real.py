"""Row 4: launch-to-ready of the real llama-server on the tiny model, against the bare binary."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from bench.common import Row, executor, free_port, med, ms, raw_health, scored
from bench.goals import GOALS

N = 4


def run(tmp: Path, quick: bool) -> list[Row]:
    import trio

    from exedra_engine import (
        CPU,
        Constraints,
        ExecutorInfo,
        Hardware,
        Kind,
        ModelSpec,
        open_instance,
        plan,
    )
    from exedra_engine.testing import write_tiny_llama

    binary = executor("llama-server")
    if binary is None:
        return [
            Row(
                n=4,
                what="launch-to-ready, real llama-server",
                ours="not installed",
                ref="-",
                figure="-",
                goal=GOALS["launch_real"].text,
                met=False,
                data={},
            )
        ]
    model = write_tiny_llama(tmp / "tiny.gguf")
    hw = Hardware(cpu=CPU(threads=2), executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(binary)),))
    p = plan(
        ModelSpec(id="t", path=str(model), kind=Kind.LLAMA), hw, Constraints(port_base=25300)
    ).unwrap()
    n = 8 if quick else 25
    ours: list[float] = []

    async def one() -> None:
        t = time.monotonic()
        async with open_instance(p):
            ours.append(time.monotonic() - t)

    ref: list[float] = []

    def direct() -> None:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
        t = time.monotonic()
        proc = subprocess.Popen(
            [
                str(binary),
                "--model",
                str(model),
                "--port",
                str(port),
                "--no-webui",
                "--n-gpu-layers",
                "0",
            ],
            env=env,
            stderr=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        try:
            while not raw_health(port):
                pass  # a tight loop, as the reference asks
            ref.append(time.monotonic() - t)
        finally:
            time.sleep(0.06)
            proc.terminate()
            proc.wait()

    for _ in range(n):  # interleaved, so drift hits both alike
        trio.run(one)
        direct()
    ratio = med(ours) / med(ref)
    return [
        scored(
            "launch_real",
            what="launch-to-ready, real llama-server, tiny model",
            ours=ms(med(ours)),
            ref=f"binary + tight /health loop {ms(med(ref))}",
            figure=f"{ratio:.2f}x",
            data={"ours_s": med(ours), "ref_s": med(ref), "ratio": ratio},
        )
    ]
