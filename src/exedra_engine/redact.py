"""Keeping secrets out of what the library and its command line print. Pure."""

from __future__ import annotations

from collections.abc import Iterable

REDACTED = "<redacted>"
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret."""
    upper = name.upper()
    return any(w in upper for w in _SECRET_WORDS)


def redact_env(item: str, secrets: Iterable[str] = ()) -> str:
    """``NAME=VALUE`` with the value hidden when the name or the value is a secret."""
    name, sep, value = item.partition("=")
    if not sep:
        return redact_text(item, secrets)
    if is_secret_name(name):
        return f"{name}={REDACTED}" if value else item
    return f"{name}={redact_text(value, secrets)}"


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret replaced."""
    for s in _longest_first(secrets):
        text = text.replace(s, REDACTED)
    return text


def redact_bytes(data: bytes, secrets: Iterable[str]) -> bytes:
    """`redact_text` for raw output, which need not be valid UTF-8."""
    for s in _longest_first(secrets):
        data = data.replace(s.encode(), REDACTED.encode())
    return data


def _longest_first(secrets: Iterable[str]) -> list[str]:
    # A key that contains another must go first, or the other's replacement leaves its rest.
    return sorted((s for s in secrets if s), key=len, reverse=True)
