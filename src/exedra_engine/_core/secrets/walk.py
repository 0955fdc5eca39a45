"""The walk over a plan's argv and env that finds its secrets where they stand. Pure.

Where a secret stands is decided by the table (`exedra_engine._core.secrets.table`) through
its judgements (`judge`): the value of a key flag or a mistyped neighbour of one, the value
of a secret-named variable, and any part of any value that is secret by its look (a key
shape, a URL's credentials). Everything that shows or writes a plan starts from this walk.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.secrets.hide import Hider
from exedra_engine._core.secrets.judge import (
    found_in,
    is_secret_flag,
    is_secret_name,
    reads_as_secret,
)
from exedra_engine._core.secrets.table import REDACTED


def secret_values(
    args: Sequence[str], executors: Executors = BUILTIN
) -> Iterator[tuple[int, str, str]]:
    """Where each key flag's value stands in `args` (a mistyped neighbour's too): its
    index, the value, and the flag's name when the value is inline (``--api-key=K``; "" for
    ``--api-key K``). Decided on the tokens as given, so ``--api-key --api-key K`` hides the
    second ``--api-key``."""
    for i, tok in enumerate(args):
        if tok[:1] != "-":
            continue
        if is_secret_flag(tok, executors):
            if i + 1 < len(args):
                yield i + 1, args[i + 1], ""
            continue
        name, sep, value = tok.partition("=")
        if sep and value and is_secret_flag(name, executors):
            yield i, value, name


def known_flag(name: str, executors: Executors) -> bool:
    """Whether any table of `executors` knows `name`."""
    return any(p.flags.lookup(name) is not None for p in executors)


def secret_values_shown(
    args: Sequence[str], executors: Executors
) -> Iterator[tuple[int, str, str]]:
    """`secret_values`, with the value of every flag whose name reads as a secret
    (`judge.reads_as_secret`) and of every flag no table of `executors` knows (an added
    executor's ``--sd-auth``): an unknown flag's value is taken to be the next token unless
    that is a known flag. What a repr hides, not knowing the executor."""
    taken = -1  # a value already hidden is no flag of its own (``--api-key -=K``)
    for i, tok in enumerate(args):
        name, eq, value = tok.partition("=")
        if name[:1] != "-" or i == taken:
            continue
        secret = reads_as_secret(name, executors)
        if not secret and known_flag(name, executors):
            continue
        if eq and value:
            yield i, value, name
        elif not eq and i + 1 < len(args):
            after = args[i + 1]
            if secret or not known_flag(after.partition("=")[0], executors):
                taken = i + 1
                yield taken, after, ""


def _split(values: Iterable[str]) -> tuple[str, ...]:
    vs = list(values)
    out = [*vs, *(part for v in vs if "," in v for part in v.split(","))]
    return tuple(dict.fromkeys(v for v in out if v))


def plan_secrets(
    args: Sequence[str], env: Iterable[str], *, executors: Executors = BUILTIN
) -> tuple[str, ...]:
    """Every secret a plan hands its executor, as free text may quote it: the value of each
    key flag (``--api-key K``, ``--hf-token=K``, a mistyped ``--api-kee K``) and of each
    secret-named variable (``LLAMA_API_KEY=K``, ``HF_TOKEN=K``), and every part of any
    value that is a secret by its look (``pw`` of ``HTTPS_PROXY=http://alice:pw@proxy``);
    whole and split at commas (llama-server reads a comma-separated list of API keys)."""
    values = [value for _, value, _ in secret_values(args, executors)]
    for tok in args:
        values += found_in(tok)
    for item in env:
        name, eq, value = item.partition("=")
        if eq and is_secret_name(name):
            values.append(value)
        elif eq:
            values += found_in(value)
    return _split(values)


def secret_copies(
    args: Sequence[str], env: Iterable[str], *, executors: Executors = BUILTIN
) -> tuple[str, ...]:
    """Where a plan hands a secret to something that does not say it is one: the variables
    and flags whose value is a key's copy (``OTHER=K`` beside ``LLAMA_API_KEY=K``), holds a
    long key inside it (``--alias m-K``, ``UPSTREAM=Bearer K``), or holds a secret by its
    look (``HTTPS_PROXY=http://alice:pw@proxy``, an ``sk-...`` key). An output that writes
    values out (``plan --emit``) cannot hide them where they stand, so it refuses them."""
    env = tuple(env)
    hide = Hider(plan_secrets(args, env, executors=executors))
    where = [
        name
        for name, eq, value in (item.partition("=") for item in env)
        if eq and not is_secret_name(name) and hide.value(value) != value
    ]
    where += _arg_copies(args, hide, {i for i, _, _ in secret_values(args, executors)})
    return tuple(dict.fromkeys(where))


def _arg_copies(args: Sequence[str], hide: Hider, keyed: set[int]) -> Iterator[str]:
    """The flags (or positions) of `args` whose value holds a secret, but those of `keyed`
    (the key flags' own values, which the emitters move into a file)."""
    for i, tok in enumerate(args):
        if i in keyed or (i == 0 and tok[:1] != "-"):
            continue
        flag, eq, value = tok.partition("=")
        if eq and flag[:1] == "-" and hide.value(value) != value:
            yield flag
        elif tok[:1] != "-" and hide.value(tok) != tok:
            yield args[i - 1] if i and args[i - 1][:1] == "-" else f"argument {i + 1}"


def redaction_markers(
    args: Sequence[str], env: Iterable[str], *, executors: Executors = BUILTIN
) -> tuple[str, ...]:
    """Where a plan hands its executor the redaction marker instead of a secret: the key
    flags and secret-named variables whose value holds `REDACTED`. A plan printed for people
    (``plan --json``) carries the marker; launched as it is, the executor would take the
    literal ``<redacted>`` as its key, a key anyone can read in the saved file."""
    where = [
        inline if inline else args[i - 1]
        for i, value, inline in secret_values(args, executors)
        if REDACTED in value
    ]
    for item in env:
        name, eq, value = item.partition("=")
        if eq and is_secret_name(name) and REDACTED in value:
            where.append(name)
    return tuple(dict.fromkeys(where))
