"""A hardware file: the JSON that ``exedra-engine probe --json`` prints, decoded into `Hardware`.

Planning for another host starts here: the file is made on the target and the plan is made
anywhere, from the file alone. Decoding is strict (an unknown or misspelt field is an error,
as in a plan) and each error names the file and the field, by msgspec's path
(``host.json: $.gpus[0].vram: Expected `int`, got `str```). Pure: the caller reads the bytes.
"""

from __future__ import annotations

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.host.machine import Hardware
from exedra_engine.errors import HardwareFileError


def hardware_from_json(
    data: bytes | str, where: str, *, executors: Executors = BUILTIN
) -> Hardware:
    """The `Hardware` that `data` describes, raising `HardwareFileError` naming `where`; its
    executors' kinds are those of `executors`."""
    try:
        hw = msgspec.json.decode(data, type=Hardware)
    except msgspec.ValidationError as e:
        raise HardwareFileError(f"{where}: {_with_path_first(str(e))}") from None
    except msgspec.DecodeError as e:
        raise HardwareFileError(f"{where}: not JSON ({e})") from None
    _check(hw, where, executors)
    return hw


def _with_path_first(message: str) -> str:
    # msgspec says "Expected `int`, got `str` - at `$.cpu.threads`"; the path reads first.
    what, sep, path = message.rpartition(" - at ")
    return f"{path.strip('`')}: {what}" if sep else f"$: {message}"


def _check(hw: Hardware, where: str, executors: Executors) -> None:
    """What the types cannot say: counts and sizes a probe can print."""
    problems: list[tuple[str, str]] = []
    if hw.cpu.threads < 1:
        problems.append(("$.cpu.threads", f"{hw.cpu.threads} is not a thread count (at least 1)"))
    if hw.cpu.ram < 0:
        problems.append(("$.cpu.ram", f"{hw.cpu.ram} is not a size in bytes"))
    if hw.cpu.available is not None and hw.cpu.available < 0:
        problems.append(("$.cpu.available", f"{hw.cpu.available} is not a size in bytes"))
    for i, g in enumerate(hw.gpus):
        if g.vram < 0:
            problems.append((f"$.gpus[{i}].vram", f"{g.vram} is not a size in bytes"))
        if g.vram_free is not None and g.vram_free < 0:
            problems.append((f"$.gpus[{i}].vram_free", f"{g.vram_free} is not a size in bytes"))
    seen: set[str] = set()
    for i, e in enumerate(hw.executors):
        if not e.path:
            problems.append((f"$.executors[{i}].path", "is empty"))
        if e.kind not in executors:
            known = ", ".join(executors.kinds)
            problems.append((f"$.executors[{i}].kind", f"unknown kind {e.kind!r} (known: {known})"))
        elif e.kind in seen:
            problems.append((f"$.executors[{i}].kind", f"{e.kind} is listed twice"))
        seen.add(e.kind)
    problems.extend(_measurement_problems(hw))
    if problems:
        path, what = problems[0]
        raise HardwareFileError(f"{where}: {path}: {what}")


def _measurement_problems(hw: Hardware) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    for i, m in enumerate(hw.measurements):
        at = f"$.measurements[{i}]"
        if not m.model:
            problems.append((f"{at}.model", "is empty"))
        if m.ctx < 0:
            problems.append((f"{at}.ctx", f"{m.ctx} is not a context size"))
        rows = (
            (f"{at}.host", m.host),
            *((f"{at}.devices[{j}]", d) for j, d in enumerate(m.devices)),
        )
        for row_at, row in rows:
            for part in ("model", "context", "compute", "free"):
                n = getattr(row, part)
                if n < 0:
                    problems.append((f"{row_at}.{part}", f"{n} is not a size in bytes"))
    return problems
