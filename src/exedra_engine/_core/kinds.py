"""Executor families: the `exedra.engine` field of a model."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

from exedra_engine._core.outcome import as_result
from exedra_engine.errors import EngineError, UnsupportedKind

if TYPE_CHECKING:
    from returns.result import Result


class Kind(enum.StrEnum):
    """An executor family."""

    LLAMA = "llama"
    """llama.cpp's ``llama-server``."""
    TRANSCRIBE = "transcribe"
    """whisper.cpp's ``whisper-server``."""

    @classmethod
    def _missing_(cls, value: object) -> Kind | None:
        # A kind registered after a decoder cached the members (msgspec does) is found here.
        member = cls._value2member_map_.get(value)
        return member if isinstance(member, Kind) else None


_ORDER: list[Kind] = [Kind.LLAMA, Kind.TRANSCRIBE]


def _add_kind(value: str) -> Kind:
    """The `Kind` of `value`, made a member for an executor registered at run time
    (`exedra_engine._core.executors.register_executor`): `Kind(value)`, msgspec and the
    override files then accept it like a built-in one."""
    if value in Kind._value2member_map_:
        return Kind(value)
    if not value or value != value.strip() or not value.isprintable():
        raise ValueError(f"not a usable kind name: {value!r}")
    member = str.__new__(Kind, value)
    member._name_ = value.upper()
    member._value_ = value
    Kind._value2member_map_[value] = member
    _ORDER.append(member)
    return member


def _drop_kind(value: str) -> None:
    member = Kind._value2member_map_.get(value)
    if member is not None and member not in Kind.__members__.values():
        del Kind._value2member_map_[value]
        _ORDER.remove(member)  # type: ignore[arg-type]


def supported_kinds() -> tuple[Kind, ...]:
    """Every executor family, in a stable order: the built-in ones, then registered ones."""
    return tuple(_ORDER)


def parse_kind(s: str) -> Result[Kind, EngineError]:
    """Validate the `exedra.engine` value of a model (exact, lower-case names)."""
    return as_result(kind_of, s)


def kind_of(s: str) -> Kind:
    """`parse_kind` for the library's own callers: raises `UnsupportedKind`."""
    try:
        return Kind(s)
    except ValueError:
        known = ", ".join(k.value for k in _ORDER)
        raise UnsupportedKind(f"unsupported executor kind {s!r} (known: {known})") from None
