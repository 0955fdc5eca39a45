"""Row 8: the real model (Gemma 3 270M): inspect, inventory, launch-to-ready, connections."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from bench.common import Row, executor, free_port, med, ms, poll_fixed, real_model, scored, timed

N = 8


def _connections(port: int) -> int:
    """Distinct client ports seen on PORT in /proc/net/tcp{,6}: every connection made to it in
    the last 60 s, since a closed one stays listed in TIME_WAIT that long (on one end or the
    other). Counted on a port that had no entries before the launch."""
    peers: set[int] = set()
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(f).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, remote, state = line.split()[1:4]
            lp, rp = int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16)
            if state == "0A":  # LISTEN
                continue
            if lp == port:
                peers.add(rp)
            elif rp == port:
                peers.add(lp)
    return len(peers)


def _inventory_row(model: Path, inspect_s: float) -> Row:
    """Issue 19 item 1: the tensor inventory (every key/value and tensor info, the
    vocabulary walked) against today's inspect (which may stop before the vocabulary)."""
    from exedra_engine._shell.inspect import read_inventory

    inv = timed(lambda: read_inventory(model).unwrap(), 15)
    ratio = med(inv) / inspect_s
    n = len(read_inventory(model).unwrap().tensors)
    return scored(
        "inventory",
        what=f"inventory, real model ({n} tensors)",
        ours=ms(med(inv)),
        ref=f"inspect {ms(inspect_s)}",
        figure=f"{ratio:.1f}x inspect",
        data={"inventory_s": med(inv), "inspect_s": inspect_s, "tensors": n},
    )


def run(tmp: Path, quick: bool) -> list[Row]:
    """Gemma 3 270M Q4_K_M: a real load (seconds), the header of a real 241 MiB file."""
    import gguf
    import trio

    from exedra_engine import (
        CPU,
        Constraints,
        ExecutorInfo,
        Hardware,
        Kind,
        ModelSpec,
        inspect,
        open_instance,
        plan,
    )

    model, binary = real_model(), executor("llama-server")
    if model is None or binary is None:
        missing = "the model" if model is None else "llama-server"
        return [
            Row(
                n=8,
                what="real model (Gemma 3 270M)",
                ours=f"{missing} missing",
                ref="-",
                figure="-",
                goal="-",
                met=False,
                data={},
            )
        ]
    rows = []
    # inspect: ours, RamaLama's parser, gguf's reader (slow: once).
    ours = timed(lambda: inspect(model).unwrap(), 15)
    try:
        from ramalama.model_inspect.gguf_parser import GGUFInfoParser

        rama: list[float] | None = timed(
            lambda: GGUFInfoParser.parse_metadata(str(model)), 1 if quick else 3
        )
    except ImportError:
        rama = None
    ref = timed(lambda: gguf.GGUFReader(str(model)), 1)
    txt = f"GGUFReader {med(ref):.1f} s" + (f", RamaLama {med(rama):.2f} s" if rama else "")
    fig = f"{med(ref) / med(ours):.0f}x / " + (
        f"{med(rama) / med(ours):.0f}x faster" if rama else "RamaLama not installed"
    )
    rows.append(
        scored(
            "real_inspect",
            what=f"inspect, real model ({model.stat().st_size >> 20} MB)",
            ours=ms(med(ours)),
            ref=txt,
            figure=fig,
            data={
                "ours_s": med(ours),
                "gguf_s": med(ref),
                "ramalama_s": med(rama) if rama else None,
            },
        )
    )
    rows.append(_inventory_row(model, med(ours)))
    # launch-to-ready and connections per launch: ours vs the bare binary with a fixed poller.
    hw = Hardware(cpu=CPU(threads=2), executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(binary)),))
    n = 2 if quick else 5
    ours_t: list[float] = []
    ours_c: list[int] = []

    async def one() -> None:
        port = free_port()
        p = plan(
            ModelSpec(id="g", path=str(model), kind=Kind.LLAMA), hw, Constraints(port=port, ctx=512)
        ).unwrap()
        before = _connections(port)
        t = time.monotonic()
        async with open_instance(p, ready_timeout=120):
            ours_t.append(time.monotonic() - t)
            ours_c.append(_connections(port) - before)

    refs: dict[str, tuple[list[float], list[int]]] = {"250 ms": ([], []), "1 s": ([], [])}

    def bare(interval: float, out: tuple[list[float], list[int]]) -> None:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
        argv = [str(binary), "-m", str(model), "--port", str(port), "-c", "512", "-ngl", "0"]
        before = _connections(port)
        t = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            out[0].append(poll_fixed(f"http://127.0.0.1:{port}/health", interval, t + 120) - t)
            out[1].append(_connections(port) - before)
        finally:
            proc.terminate()
            proc.wait()

    for _ in range(n):  # interleaved, so drift hits all three alike
        trio.run(one)
        bare(0.25, refs["250 ms"])
        bare(1.0, refs["1 s"])
    r250, r1 = (med(refs[k][0]) / med(ours_t) for k in ("250 ms", "1 s"))
    rows.append(
        scored(
            "real_launch",
            what=f"launch-to-ready, real model ({n} launches each)",
            ours=f"{med(ours_t):.2f} s",
            ref=f"250 ms poller {med(refs['250 ms'][0]):.2f} s, "
            f"1 s poller {med(refs['1 s'][0]):.2f} s",
            figure=f"{r250:.2f}x / {r1:.2f}x sooner",
            data={
                "ours_s": med(ours_t),
                "ref_250ms_s": med(refs["250 ms"][0]),
                "ref_1s_s": med(refs["1 s"][0]),
            },
        )
    )
    rows.append(
        scored(
            "connections",
            what="TCP connections opened per launch, real model",
            ours=f"median {med(ours_c):.0f}, max {max(ours_c)}",
            ref=f"250 ms poller {med(refs['250 ms'][1]):.0f}, 1 s poller {med(refs['1 s'][1]):.0f}",
            figure=f"{med(ours_c):.0f} per launch",
            data={"ours": ours_c, "ref_250ms": refs["250 ms"][1], "ref_1s": refs["1 s"][1]},
        )
    )
    return rows
