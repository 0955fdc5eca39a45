"""The walker's judgements, read from its table (`exedra_engine._core.secrets.table`):
whether a name, a flag or a value is secret, and which parts of a value are. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.secrets.table import (
    FLAG_DISTANCE,
    FLAG_MIN_NAME,
    HTTP_CREDENTIAL,
    NOT_SECRET_NAMES,
    NOT_SECRET_WORDS,
    PREFIXED,
    SECRET_ENDINGS,
    SECRET_PARAMS,
    SECRET_WORDS,
    URL_QUERY,
    URL_USERINFO,
    WHOLE,
    looks_random,
)

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def name_words(name: str) -> list[str]:
    """The words of a variable's or flag's name, upper-cased: cut at ``_ - .`` and where
    lower case turns upper (``apiKey`` -> ``API``, ``KEY``)."""
    return [w.upper() for part in re.split(r"[_.\-]+", name) for w in _WORDS.findall(part)]


@lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether an environment variable's (or a query parameter's, or a flag's) name says it
    holds a secret, by the table's words (see `exedra_engine._core.secrets.table`)."""
    if name.upper() in NOT_SECRET_NAMES:
        return False
    for w in name_words(name):
        if w in SECRET_WORDS:
            return True
        if w not in NOT_SECRET_WORDS and any(w.endswith(e) for e in SECRET_ENDINGS):
            return True
    return False


def _norm(flag: str) -> str:
    return flag.lstrip("-").replace("_", "").replace("-", "").lower()


def _within(a: str, b: str, most: int) -> bool:
    """Whether `a` becomes `b` by at most `most` edits (optimal string alignment)."""
    if abs(len(a) - len(b)) > most:
        return False
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        if min(cur) > most:
            return False
        prev2, prev = prev, cur
    return prev[-1] <= most


@lru_cache(maxsize=4096)
def _neighbour(name: str, secret_flags: frozenset[str]) -> bool:
    n = _norm(name)
    for f in secret_flags:
        s = _norm(f)
        if n == s or (len(s) >= FLAG_MIN_NAME and _within(n, s, FLAG_DISTANCE)):
            return True
    return False


def _known(name: str, executors: Executors) -> bool:
    return any(p.flags.lookup(name) is not None for p in executors)


def is_secret_flag(name: str, executors: Executors = BUILTIN) -> bool:
    """Whether `name` (a flag without its ``=value``) takes a secret: a secret flag of
    `executors`, or a mistyped neighbour of one that no executor's table knows
    (``--api-kee``, ``--apikey``, ``--hf_token``, ``--API-KEY``)."""
    if name[:1] != "-":
        return False
    if executors.is_secret_flag(name):
        return True
    return _neighbour(name, executors.secret_flags) and not _known(name, executors)


def reads_as_secret(name: str, executors: Executors = BUILTIN) -> bool:
    """Whether a flag takes a secret or its name reads as one (``--sd-token``, a third
    executor's key flag): what a repr, which cannot tell which executor a flag is for,
    hides."""
    return is_secret_flag(name, executors) or (name[:1] == "-" and is_secret_name(name))


def shaped_parts(value: str) -> Iterator[tuple[int, int]]:
    """Where `value` holds a key by its shape (`table.PREFIXED_SHAPES` and the token of
    `table.HTTP_CREDENTIAL` anywhere, `table.WHOLE_SHAPES` when it is the whole value), as
    (start, end)."""
    for m in PREFIXED.finditer(value):
        yield m.span()
    for m in HTTP_CREDENTIAL.finditer(value):
        yield m.span("token")
    if len(value) >= 32 and any(p.fullmatch(value) for p in WHOLE) and looks_random(value):
        yield 0, len(value)


def url_parts(value: str) -> Iterator[tuple[int, int]]:
    """Where `value` holds a credential inside a URL: a userinfo (``alice:pw`` of
    ``http://alice:pw@proxy``), or a secret query parameter's value (``?key=K``)."""
    if "://" not in value and "=" not in value:
        return
    for m in URL_USERINFO.finditer(value):
        yield m.span("info")
    if "?" in value or "&" in value:
        for m in URL_QUERY.finditer(value):
            name = m.group("name")
            if name.lower() in SECRET_PARAMS or is_secret_name(name):
                yield m.span("value")


def secret_parts(value: str) -> list[tuple[int, int]]:
    """Every part of `value` that is a secret by its own look (shape or URL credential),
    sorted and merged."""
    spans = sorted([*shaped_parts(value), *url_parts(value)])
    out: list[tuple[int, int]] = []
    for a, b in spans:
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return out


def found_in(value: str) -> list[str]:
    """The secrets `value` holds by its own look, as text: each part `secret_parts` hides,
    and each secret inside it on its own (the password of ``alice:pw``, a key shape inside
    a URL's credentials), which free text may quote apart."""
    spans = [*shaped_parts(value), *url_parts(value)]
    out = [value[a:b] for a, b in (*secret_parts(value), *spans)]
    out += [info.partition(":")[2] for info in out if ":" in info]
    return list(dict.fromkeys(s for s in out if s))


def looks_secret(value: str) -> bool:
    """Whether `value` holds a secret by its own look: a key shape or a URL credential.
    What an error must not echo, whatever option it was typed into."""
    return bool(secret_parts(value))
