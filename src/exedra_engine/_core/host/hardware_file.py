"""A hardware file: the JSON that ``exedra-engine probe --json`` prints, decoded into `Hardware`.

Planning for another host starts here: the file is made on the target and the plan is made
anywhere, from the file alone. Decoding is strict (an unknown or misspelt field is an error,
as in a plan) and each error names the file and the field, by msgspec's path
(``host.json: $.gpus[0].vram: Expected `int`, got `str```). Pure: the caller reads the bytes.
"""

from __future__ import annotations

import re

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import Row
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.host.devices import device_problems
from exedra_engine._core.host.machine import Hardware
from exedra_engine._core.host.measurement_bounds import measurement_problems
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
    if not 1 <= hw.cpu.threads <= MAX_HOST_THREADS:
        # Bounded before anything is built from it: a group's CPU sets are lists of ids.
        problems.append(
            (
                "$.cpu.threads",
                f"{hw.cpu.threads} is not a thread count (1 to {MAX_HOST_THREADS}, a host's)",
            )
        )
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
        problems.extend(_flag_problems(e.flags, f"$.executors[{i}].flags"))
        problems.extend(device_problems(e.devices, f"$.executors[{i}].devices"))
        problems.extend(_device_env_problems(e.devices_env, f"$.executors[{i}].devices_env"))
    problems.extend(_measurement_problems(hw, executors))
    if problems:
        path, what = problems[0]
        raise HardwareFileError(f"{where}: {path}: {what}")


def _measurement_problems(hw: Hardware, executors: Executors) -> list[tuple[str, str]]:
    measuring = [p for p in executors if p.measure_binary]
    return [
        (f"$.measurements[{i}]{field}", what)
        for i, m in enumerate(hw.measurements)
        for field, what in measurement_problems(m, measuring)
    ]


MAX_HOST_THREADS = 8192
"""The most CPU threads a hardware file may state: Linux's largest ``NR_CPUS``."""


def _device_env_problems(pairs: tuple[tuple[str, str], ...], at: str) -> list[tuple[str, str]]:
    if len(pairs) > 16:
        return [(at, f"{len(pairs)} variables: more than 16")]
    for j, (name, value) in enumerate(pairs):
        if not _ENV_NAME.fullmatch(name) or len(value) > 1024 or not value.isprintable():
            return [(f"{at}[{j}]", "not a variable name and printable value of up to 1024")]
    return []


MAX_FLAG_ROWS = 2048
"""Rows a recorded flag table may hold (llama-server lists about 250)."""
_FLAG_NAME = re.compile(r"-{1,2}[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
_TAKES = re.compile(r"[ -~]{0,2048}")


def _flag_problems(rows: tuple[Row, ...], at: str) -> list[tuple[str, str]]:
    """A recorded flag table is judged by, and names flags in findings: only the shapes the
    help parser makes, bounded, so that a hostile file cannot print or choke on them."""
    if len(rows) > MAX_FLAG_ROWS:
        return [(at, f"{len(rows)} rows: more than {MAX_FLAG_ROWS}, not an executor's flags")]
    for j, row in enumerate(rows):
        if what := _row_problem(row):
            return [(f"{at}[{j}]", what)]
    return []


def _row_problem(row: Row) -> str:
    names, negations, nargs, env, takes = row
    if not names or len(names) + len(negations) > 16:
        return "a row names 1 to 16 flags"
    bad = next((n for n in (*names, *negations) if not _FLAG_NAME.fullmatch(n)), None)
    if bad is not None:
        return f"{bad[:40]!r} is not a flag name"
    if nargs not in (0, 1, 2):
        return f"nargs {nargs} is not 0, 1 or 2"
    bad = next((v for v in env if not _ENV_NAME.fullmatch(v)), None)
    if bad is not None or len(env) > 8:
        return f"{(bad or '')[:40]!r} is not a variable name"
    if not _TAKES.fullmatch(takes):
        return "its value type is not printable text of up to 2048 characters"
    return ""
