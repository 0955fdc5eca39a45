"""Row 7: probe on the four-GPU fixture tree."""

from __future__ import annotations

import timeit
from pathlib import Path

from bench.common import HOSTS, Row, med, scored, us

N = 7


def run(tmp: Path, quick: bool) -> list[Row]:
    from exedra_engine import probe
    from exedra_engine._shell.local.host import LocalHost

    h = LocalHost(str(HOSTS / "four-gpus"), path_env="/usr/bin", affinity=8)
    assert len(probe(h).unwrap().gpus) == 4
    t = [x / 50 for x in timeit.repeat(lambda: probe(h), number=50, repeat=9)]
    return [
        scored(
            "probe",
            what="probe, fixture tree with 4 GPUs",
            ours=us(med(t)),
            ref="-",
            figure=us(med(t)),
            data={"ours_s": med(t)},
        )
    ]
