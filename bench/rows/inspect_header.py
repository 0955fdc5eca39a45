"""Row 1: inspect on generated headers, against gguf's reader."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from bench.common import Row, med, ms, scored, timed, us

N = 1


def run(tmp: Path, quick: bool) -> list[Row]:
    import gguf

    from exedra_engine import inspect
    from exedra_engine.testing import write_header_model

    rows = []
    big = write_header_model(tmp / "h152k.gguf", vocab=151_936, file_type_after_vocab=True)
    ours = timed(lambda: inspect(big).unwrap(), 15)
    tracemalloc.start()
    inspect(big).unwrap()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    ref = timed(lambda: gguf.GGUFReader(str(big)), 1 if quick else 3)
    tracemalloc.start()
    gguf.GGUFReader(str(big))
    _, ref_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    ratio = med(ref) / med(ours)
    rows.append(
        scored(
            "inspect_152k",
            what=f"inspect, 152k vocab, file_type after it ({big.stat().st_size >> 20} MB)",
            ours=f"{ms(med(ours))}, peak {peak / 2**20:.1f} MB",
            ref=f"GGUFReader {med(ref):.2f} s, peak {ref_peak / 2**20:.0f} MB",
            figure=f"{ratio:.0f}x faster",
            data={
                "ours_s": med(ours),
                "ref_s": med(ref),
                "ratio": ratio,
                "peak_bytes": peak,
                "ref_peak_bytes": ref_peak,
            },
        )
    )
    m32 = write_header_model(
        tmp / "h32k.gguf", vocab=32_000, merges=0, architecture="llama", file_type_after_vocab=True
    )
    ours32 = timed(lambda: inspect(m32).unwrap(), 30)
    ref32 = timed(lambda: gguf.GGUFReader(str(m32)), 3)
    r32 = med(ref32) / med(ours32)
    rows.append(
        scored(
            "inspect_32k",
            what="inspect, 32k vocab, no merges, file_type after it",
            ours=ms(med(ours32)),
            ref=f"GGUFReader {ms(med(ref32))}",
            figure=f"{r32:.0f}x faster",
            data={"ours_s": med(ours32), "ref_s": med(ref32), "ratio": r32},
        )
    )
    early = write_header_model(tmp / "early.gguf", vocab=151_936, file_type_after_vocab=False)
    oe = timed(lambda: inspect(early).unwrap(), 200)
    rows.append(
        scored(
            "inspect_early",
            what="inspect, 152k vocab, every field before it",
            ours=us(med(oe)),
            ref="-",
            figure=us(med(oe)),
            data={"ours_s": med(oe)},
        )
    )
    return rows
