"""Why an executor would refuse or misread a flag's value, and what to write instead."""

from __future__ import annotations

import re

from exedra_engine._core.config.did_you_mean import close
from exedra_engine._core.executors.flags import Flag
from exedra_engine.constants import MAX_THREADS

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|infinity|nan)", re.I)
_INT_PREFIX = re.compile(r"\s*[+-]?\d+")
_FLOAT_PREFIX = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_SIZE = re.compile(r"(\d+)([kKmM])")
_INT32 = 2**31 - 1
_GGML_THREADS = frozenset(
    {"--threads", "--threads-batch", "--threads-draft", "--threads-batch-draft"}
)
"""The flags whose value is a count of ggml's compute threads (not ``--threads-http``)."""


def too_many_threads(shown: str, binary: str) -> str:
    """Why a thread count above `MAX_THREADS` (`shown` as the caller wrote it) is refused."""
    return (
        f"{shown} is more than {MAX_THREADS}, the most CPU threads ggml places "
        f"(GGML_MAX_N_THREADS); far more make {binary} abort (std::bad_alloc) once started"
    )


def value_problem(flag: Flag, value: str, binary: str, name: str = "") -> tuple[str, str] | None:
    """Why `binary` would refuse or misread `value` for `flag` (and what to write instead), or
    None when the table does not say what it takes or the value fits. `name` is the flag's
    spelling as written (default: its key)."""
    t = flag.takes
    name = name or flag.key
    if flag.key in _GGML_THREADS and _INT.fullmatch(value) and int(value) > MAX_THREADS:
        return too_many_threads(f"{name} {value}", binary), str(MAX_THREADS)
    if t == "int":
        return _int_problem(name, value, binary)
    if t in ("float", "number"):
        return _number_problem(name, value, binary)
    if t.startswith("choice:"):
        return _choice_problem(name, t[7:].split(","), value, binary)
    return None


def _number_problem(name: str, value: str, binary: str) -> tuple[str, str] | None:
    if _FLOAT.fullmatch(value):
        return None
    prefix = _FLOAT_PREFIX.match(value)
    if prefix:
        got = prefix.group().strip()
        return (
            f"{name} takes a number: {binary} reads {value!r} as {got} and ignores the rest",
            got,
        )
    return f"{name} takes a number: {binary} refuses {value!r} at start", ""


def _choice_problem(
    name: str, choices: list[str], value: str, binary: str
) -> tuple[str, str] | None:
    if value in choices:
        return None
    lower = [c for c in choices if c == value.lower()]
    return (
        f"{name} takes one of {', '.join(choices)}: {binary} refuses {value!r} at start",
        lower[0] if lower else close(value, choices, 0.5),
    )


def _int_problem(name: str, value: str, binary: str) -> tuple[str, str] | None:
    if _INT.fullmatch(value):
        if abs(int(value)) <= _INT32:
            return None
        return f"{name}: {value} is out of an integer's range: {binary} refuses it", ""
    size = _SIZE.fullmatch(value)
    suggestion = ""
    if size:
        suggestion = str(int(size.group(1)) * (1024 if size.group(2) in "kK" else 1024 * 1024))
    prefix = _INT_PREFIX.match(value)
    if prefix:
        got = prefix.group().strip()
        return (
            f"{name} takes an integer: {binary} reads {value!r} as {got} "
            "(it stops at the first character that is not a digit)",
            suggestion or got,
        )
    return f"{name} takes an integer: {binary} refuses {value!r} at start", suggestion
