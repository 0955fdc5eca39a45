"""One module per row of the bench, each with its number `N` and `run(tmp, quick)`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from bench.common import Row
from bench.rows import (
    build_matrix,
    cli_start,
    group,
    inspect_header,
    launch_real,
    memory,
    plan,
    probe,
    readiness,
    real_model,
    stop,
    vs_ramalama,
)

RowRun = Callable[[Path, bool], list[Row]]

_MODULES: tuple[ModuleType, ...] = (
    inspect_header,
    plan,
    readiness,
    launch_real,
    stop,
    cli_start,
    probe,
    real_model,
    vs_ramalama,
    memory,
    group,
    build_matrix,
)

ROWS: dict[int, RowRun] = {m.N: m.run for m in _MODULES}
"""Row number -> its measurement, in the order they run."""
