"""What a measurement may hold: the bounds of llama-fit-params' figures, and what makes a
`FitMeasurement` read from a file (a hardware file's ``measurements``) no measurement.
The parser of the companion's output (`exedra_engine._core.memory.fit_params`) holds its
figures to the same bounds."""

from __future__ import annotations

import re
from collections.abc import Sequence

from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.host.machine import FitMeasurement, FitRow
from exedra_engine.errors import PlanError

MAX_ROWS = 64
"""More rows than this is not llama-fit-params' output (it prints one per device + Host)."""
MAX_CTX = 2**31 - 1
"""The largest context an executor takes (it reads ``--ctx-size`` into an int32)."""
MAX_BYTES = 1 << 50
"""More bytes than this (1 PiB) in one part of a row is no host's memory."""
MAX_TOKENS = 256
"""Flags of one measurement (`FitMeasurement.settings`, `args`): a plan's memory flags."""
MAX_TEXT = 4096
"""Characters of one path or flag of a measurement."""
# ASCII only: Python's \d and \S also match other scripts' digits (Arabic-Indic) and control
# characters (NUL, ESC), which an engine's output never holds and a terminal would act on.
DEVICE_NAME = r"[!-~]{1,64}"
"""A device name as llama.cpp prints it: 1 to 64 printable ASCII characters."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def measurement_problems(
    m: FitMeasurement, profiles: Sequence[ExecutorProfile] = ()
) -> list[tuple[str, str]]:
    """What makes a measurement read from a file (a hardware file's ``measurements``) no
    measurement, as (field, what): bounds, printable names, no device twice, and
    `settings` that each of `profiles` (those with a measuring companion) can cut, so that
    one bad entry is refused naming its file and field, not at every plan without either."""
    out = _text_problems(m)
    for p in profiles:
        try:
            p.flags.split_items(m.settings, "settings")
        except PlanError as e:
            out.append((".settings", f"{p.binary} cannot read them: {e}"))
    return out + _rows_problems(m)


def _text_problems(m: FitMeasurement) -> list[tuple[str, str]]:
    """The measurement's texts, context and flags out of bounds."""
    out: list[tuple[str, str]] = []
    for field, text in (("model", m.model), ("build", m.build)):
        if _CONTROL.search(text) or len(text) > MAX_TEXT:
            out.append((f".{field}", "holds a control character or is too long"))
    if not m.model:
        out.append((".model", "is empty"))
    if not 0 <= m.ctx <= MAX_CTX:
        out.append((".ctx", f"{m.ctx} is not a context size (0 to {MAX_CTX})"))
    for field, tokens in (("settings", m.settings), ("args", m.args)):
        if len(tokens) > MAX_TOKENS:
            out.append((f".{field}", f"{len(tokens)} flags: more than {MAX_TOKENS}"))
        elif any(_CONTROL.search(t) or len(t) > MAX_TEXT for t in tokens):
            out.append((f".{field}", "a flag holds a control character or is too long"))
    return out


def _rows_problems(m: FitMeasurement) -> list[tuple[str, str]]:
    """The host's and the devices' rows: how many, their names and sizes."""
    out: list[tuple[str, str]] = []
    if len(m.devices) > MAX_ROWS:
        out.append((".devices", f"{len(m.devices)} rows: more than {MAX_ROWS}"))
    rows = ((".host", m.host), *((f".devices[{j}]", d) for j, d in enumerate(m.devices)))
    seen: set[str] = set()
    for at, row in rows:
        out += _row_problems(at, row, seen)
    if m.host.name != "Host":
        out.append((".host.name", f"{m.host.name[:64]!r} is not Host"))
    return out


def _row_problems(at: str, row: FitRow, seen: set[str]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if not re.fullmatch(DEVICE_NAME, row.name):
        out.append((f"{at}.name", "is not 1 to 64 printable ASCII characters"))
    elif row.name in seen:
        out.append((f"{at}.name", f"device {row.name} is listed twice"))
    seen.add(row.name)
    for part in ("model", "context", "compute", "free"):
        n = getattr(row, part)
        if not 0 <= n <= MAX_BYTES:
            out.append((f"{at}.{part}", f"{n} is not a size in bytes (0 to 1 PiB)"))
    return out
