"""Executor families: the `exedra.engine` field of a model.

`Kind` names the built-in families and is never extended. A field that holds a family's name
(`ModelSpec.kind`, `ExecutorInfo.kind`, the ``engines:`` keys of override files) is a
`KindName`, a plain validated string: a profile added through
`exedra_engine._core.executors.profile.Executors.with_` has a usable kind without touching the enum,
and which kinds exist is answered by the `Executors` value a function is given.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Annotated, Final

import msgspec

from exedra_engine._core.outcome import as_result
from exedra_engine.errors import EngineError, UnsupportedKind

if TYPE_CHECKING:
    from returns.result import Result

KIND_PATTERN: Final = r"^[a-z][a-z0-9_-]*$"
"""What a kind name looks like: lower case, as the ``engines:`` keys of override files."""

# msgspec validates the pattern when it decodes; a str subclass it could neither encode nor
# decode, so the type is an annotated str.
KindName = Annotated[str, msgspec.Meta(pattern=KIND_PATTERN)]
"""The name of an executor family: a `Kind` or the kind of a profile given at run time."""


class Kind(enum.StrEnum):
    """A built-in executor family."""

    LLAMA = "llama"
    """llama.cpp's ``llama-server``."""
    TRANSCRIBE = "transcribe"
    """whisper.cpp's ``whisper-server``."""


def supported_kinds() -> tuple[Kind, ...]:
    """The built-in executor families, in a stable order (the kinds of a given `Executors`
    value are its `kinds`)."""
    return tuple(Kind)


def parse_kind(s: str) -> Result[Kind, EngineError]:
    """Validate the `exedra.engine` value of a model against the built-in kinds (exact,
    lower-case names)."""
    return as_result(kind_of, s)


def kind_of(s: str) -> Kind:
    """`parse_kind` for the library's own callers: raises `UnsupportedKind`."""
    try:
        return Kind(s)
    except ValueError:
        raise unsupported(s, tuple(Kind)) from None


def unsupported(kind: str, known: tuple[str, ...]) -> UnsupportedKind:
    """The error for a kind outside `known`, naming the known ones."""
    names = ", ".join(known)
    return UnsupportedKind(f"unsupported executor kind {kind!r} (known: {names})")
