"""Executor families: the `exedra.engine` field of a model."""

from __future__ import annotations

import enum

from returns.result import Failure, Result, Success

from exedra_engine.errors import EngineError, UnsupportedKind


class Kind(enum.StrEnum):
    """An executor family."""

    LLAMA = "llama"
    """llama.cpp's ``llama-server``."""
    TRANSCRIBE = "transcribe"
    """whisper.cpp's ``whisper-server``."""


_ORDER = (Kind.LLAMA, Kind.TRANSCRIBE)

BINARIES: dict[Kind, str] = {Kind.LLAMA: "llama-server", Kind.TRANSCRIBE: "whisper-server"}
"""The executable name of each family, as found on PATH."""

TIME_WAIT_BLOCKS_BIND: dict[Kind, bool] = {Kind.LLAMA: False, Kind.TRANSCRIBE: True}
"""Whether a port with sockets in TIME_WAIT is unusable for the family's server, checked with
the binaries: llama-server binds with SO_REUSEADDR and restarts on such a port at once;
whisper-server binds without it and fails with "address in use" until TIME_WAIT ends."""


def supported_kinds() -> tuple[Kind, ...]:
    """Every executor family, in a stable order."""
    return _ORDER


def parse_kind(s: str) -> Result[Kind, EngineError]:
    """Validate the `exedra.engine` value of a model (exact, lower-case names)."""
    try:
        return Success(Kind(s))
    except ValueError:
        known = ", ".join(k.value for k in _ORDER)
        return Failure(UnsupportedKind(f"unsupported executor kind {s!r} (known: {known})"))
