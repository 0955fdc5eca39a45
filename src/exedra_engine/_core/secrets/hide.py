"""Hiding found secrets: in one value (`Hider`) and in free text (`TextRedactor`). Pure.

Both hide every occurrence of a secret of `SHORT_KEY` characters or more, inside longer
text too, and every part that is a secret by its own look (`judge.secret_parts`). A shorter
secret is hidden where it stands: a whole value or an item of a comma list (`Hider`), a
token of free text whose neighbours are no letter, digit or ``_`` (`TextRedactor`). So with
the key ``k``, ``Bearer k`` and ``key=k`` are redacted and ``gemma-3-270m-q4_k_m.gguf`` is
left as it is; keys are tried longest first, so a key that contains another is hidden whole.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Final

from exedra_engine._core.secrets.judge import is_secret_name, secret_parts
from exedra_engine._core.secrets.table import (
    LOG_PATTERNS,
    PREFIXED,
    REDACTED,
    SHORT_KEY,
    URL_USERINFO,
)

_NOT_WORD_BEFORE: Final = "(?<![A-Za-z0-9_])"
_NOT_WORD_AFTER: Final = "(?![A-Za-z0-9_])"
_REDACTED_BYTES: Final = REDACTED.encode()


def copied_secret(value: str, secrets: Collection[str]) -> bool:
    """Whether `value` is one of `secrets`, whole or as an item of a comma-separated list (as
    llama-server reads a key list): compared whole, never searched as a substring, so a key
    ``1`` does not hide the ``1`` of ``127.0.0.1``."""
    return bool(value) and (value in secrets or any(p in secrets for p in value.split(",")))


def _longest_first(secrets: Iterable[str]) -> list[str]:
    # A key that contains another must go first, or the other's replacement leaves its rest.
    return sorted({s for s in secrets if s}, key=len, reverse=True)


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return out


def _replaced(value: str, spans: Iterable[tuple[int, int]]) -> str:
    out, at = [], 0
    for a, b in _merged(spans):
        out += [value[at:a], REDACTED]
        at = b
    return "".join([*out, value[at:]])


class Hider:
    """Hides `secrets` in values that stand alone (a variable's, a flag's, an operand)."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = frozenset(s for s in secrets if s)
        longs = _longest_first(s for s in self.secrets if len(s) >= SHORT_KEY)
        self._long = re.compile("|".join(map(re.escape, longs))) if longs else None

    def value(self, value: str) -> str:
        """`value` with every secret in it hidden: whole when it is one, else each long
        secret's occurrence and each part secret by its look."""
        if not value:
            return value
        if copied_secret(value, self.secrets):
            return REDACTED
        spans = secret_parts(value)
        if self._long is not None:
            spans += [m.span() for m in self._long.finditer(value)]
        return _replaced(value, spans) if spans else value

    def token(self, tok: str) -> str:
        """One argv token: a ``--flag=value``'s value, or the whole token."""
        name, eq, value = tok.partition("=")
        if tok[:1] == "-" and eq:
            shown = self.value(value)
            return tok if shown == value else f"{name}={shown}"
        return self.value(tok)

    def env(self, item: str) -> str:
        """One ``NAME=VALUE``: the value hidden whole when the name says it is a secret."""
        name, eq, value = item.partition("=")
        if not eq or not value:
            return item
        if is_secret_name(name):
            return f"{name}={REDACTED}"
        shown = self.value(value)
        return item if shown == value else f"{name}={shown}"


class TextRedactor:
    """Hides keys in free text (an executor's log lines), where nothing says where a key
    stands. Built once per launch, applied per line.

    A key of `SHORT_KEY` characters or more is hidden wherever it occurs. A shorter one is
    hidden only where it stands as a token, not inside a word: neither neighbour is a letter,
    a digit or ``_``. Then what is secret by its look: key shapes with a prefix, a URL's
    userinfo, and what an executor prints about its key (`table.LOG_PATTERNS`).
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        keys = _longest_first(secrets)
        self.longest = len(keys[0].encode("utf-8", "surrogateescape")) if keys else 0
        """The longest key's length in bytes: a cut closer than this to a line's end may
        split one (`LogLines`)."""
        alts = [
            re.escape(k)
            if len(k) >= SHORT_KEY
            else f"{_NOT_WORD_BEFORE}{re.escape(k)}{_NOT_WORD_AFTER}"
            for k in keys
        ]
        self._text = re.compile("|".join(alts)) if alts else None
        self._bytes = (
            re.compile("|".join(alts).encode("utf-8", "surrogateescape")) if alts else None
        )

    def key_spans(self, data: bytes) -> list[tuple[int, int]]:
        """Where the keys stand in `data`, as (start, end)."""
        return [m.span() for m in self._bytes.finditer(data)] if self._bytes is not None else []

    def text(self, text: str) -> str:
        """`text` with the keys hidden."""
        if self._text is not None:
            text = self._text.sub(REDACTED, text)
        for p in _LOG_TEXT:
            text = p.sub(rf"\1{REDACTED}", text)
        text = PREFIXED.sub(REDACTED, text)
        return URL_USERINFO.sub(rf"\g<scheme>{REDACTED}@", text)

    def bytes(self, data: bytes) -> bytes:
        """`data`, which need not be valid UTF-8, with the keys hidden."""
        if self._bytes is not None:
            data = self._bytes.sub(_REDACTED_BYTES, data)
        return _by_look(data)


_LOG_TEXT: Final = tuple(re.compile(p.pattern.decode()) for p in LOG_PATTERNS)
_PREFIXED_BYTES: Final = re.compile(PREFIXED.pattern.encode())
_USERINFO_BYTES: Final = re.compile(URL_USERINFO.pattern.encode())


def _by_look(data: bytes) -> bytes:
    """`data` with what is secret by its look hidden (after the keys)."""
    for p in LOG_PATTERNS:
        data = p.sub(rb"\1" + _REDACTED_BYTES, data)
    data = _PREFIXED_BYTES.sub(_REDACTED_BYTES, data)
    return _USERINFO_BYTES.sub(rb"\g<scheme>" + _REDACTED_BYTES + b"@", data)


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """`text` with the keys hidden, by `TextRedactor`'s rule: for free text only."""
    return TextRedactor(secrets).text(text)


def redact_bytes(data: bytes, secrets: Iterable[str]) -> bytes:
    """`redact_text` for raw output, which need not be valid UTF-8."""
    return TextRedactor(secrets).bytes(data)
