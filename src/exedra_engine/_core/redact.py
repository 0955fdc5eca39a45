"""Keeping secrets out of what the library and its command line print. Pure.

Secrets are redacted where they stand, never by searching every string for every key (a
one-character key ``1`` would otherwise turn ``127.0.0.1`` into ``<redacted>27.0.0.<redacted>``):

- the value of a key flag (an executor profile's ``secret_flags``), in both the
  ``--flag value`` and the ``--flag=value`` forms;
- the value of a variable whose name says it is a secret (`is_secret_name`: ``LLAMA_API_KEY``,
  ``HF_TOKEN``, ``*_PASSWORD``...).

Only free text that has no structure, an executor's log lines, is searched for the keys it
may carry (`TextRedactor`, built once per launch from `plan_secrets`), by this rule:

- a key of `SHORT_KEY` (8) characters or more is replaced wherever it occurs: that long a
  string is no accident of the text around it;
- a shorter key is replaced only where it stands as a token: the character before it and the
  character after it are each absent or outside ``[A-Za-z0-9_]``. With the key ``k``,
  ``Bearer k``, ``key=k`` and ``"k"`` are redacted and ``gemma-3-270m-q4_k_m.gguf`` is left as
  it is. A short key glued inside a word stays visible: no rule can hide it there without
  turning every word that contains it into noise;
- keys are tried longest first at each place, so a key that contains another is hidden whole.
  Neighbours are judged on the original text, not on what an earlier replacement left.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Final

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine.errors import PlanError

if TYPE_CHECKING:
    from exedra_engine._core.plan.layers import Provenance, Said, Source
    from exedra_engine._core.values import Config, LaunchPlan, Override

REDACTED = "<redacted>"
ENGINE_LAYER: Final = "engine"
"""The layer of the flags the planner derives itself (`exedra_engine._core.plan.planner`)."""
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret."""
    upper = name.upper()
    return any(w in upper for w in _SECRET_WORDS)


def redact_env(item: str) -> str:
    """``NAME=VALUE`` with the value hidden when the name says it is a secret."""
    name, sep, value = item.partition("=")
    if sep and value and is_secret_name(name):
        return f"{name}={REDACTED}"
    return item


def _secret_values(
    args: Sequence[str], executors: Executors = BUILTIN
) -> Iterator[tuple[int, str, str]]:
    """Where each key flag's value stands in `args`: its index, the value, and the flag's
    name when the value is inline (``--api-key=K``; "" for ``--api-key K``). Decided on the
    tokens as given, so ``--api-key --api-key K`` hides the second ``--api-key``."""
    for i, tok in enumerate(args):
        if executors.is_secret_flag(tok):
            if i + 1 < len(args):
                yield i + 1, args[i + 1], ""
        elif tok[:1] == "-":
            name, sep, value = tok.partition("=")
            if sep and value and executors.is_secret_flag(name):
                yield i, value, name


def redact_args(args: Sequence[str], *, executors: Executors = BUILTIN) -> tuple[str, ...]:
    """`args` with the value of every key flag hidden (``--api-key K``, ``--api-key=K``)."""
    out = list(args)
    for i, _, inline in _secret_values(args, executors):
        out[i] = f"{inline}={REDACTED}" if inline else REDACTED
    return tuple(out)


def _reads_secret(name: str, executors: Executors) -> bool:
    """Whether an option's name (``--sd-token``) is a secret flag of `executors`, or reads
    as one (`is_secret_name`)."""
    return name[:1] == "-" and (executors.is_secret_flag(name) or is_secret_name(name))


def _known_flag(name: str, executors: Executors) -> bool:
    return any(p.flags.lookup(name) is not None for p in executors)


def _secret_values_shown(
    args: Sequence[str], executors: Executors
) -> Iterator[tuple[int, str, str]]:
    """`_secret_values`, with the value of every flag whose name reads as a secret
    (`_reads_secret`) and of every flag no table of `executors` knows (a mistyped
    ``--api-kee``, an added executor's ``--sd-auth``): an unknown flag's value is taken to
    be the next token unless that is a known flag."""
    taken = -1  # a value already hidden is no flag of its own (``--api-key -=K``)
    for i, tok in enumerate(args):
        name, eq, value = tok.partition("=")
        if name[:1] != "-" or i == taken:
            continue
        secret = _reads_secret(name, executors)
        if not secret and _known_flag(name, executors):
            continue
        if eq and value:
            yield i, value, name
        elif not eq and i + 1 < len(args):
            after = args[i + 1]
            if secret or not _known_flag(after.partition("=")[0], executors):
                taken = i + 1
                yield taken, after, ""


def redact_shown(
    args: Sequence[str],
    env: Iterable[str] = (),
    *,
    api_key: str = "",
    executors: Executors = BUILTIN,
    every_value: bool = False,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """`args` and `env` as a repr may show them, without the `Executors` value a plan was
    made with: the value after any flag that is a secret flag of `executors` or whose name
    reads as a secret (``--sd-token``, a third executor's key flag), and of any secret-named
    variable, hidden; then every copy of those values and of `api_key`, in any token or
    variable. It hides more than `redact_args` (``--ssl-key-file``'s path too): a repr that
    shows too little costs a look at the plan, one that shows a key leaks it.

    With `every_value` (argv for an executor `executors` does not know, whose secret flags
    may read as anything), every value and every variable's value is hidden."""
    if every_value:
        return _every_value_hidden(args), tuple(f"{e.partition('=')[0]}={REDACTED}" for e in env)
    found = list(_secret_values_shown(args, executors))
    secrets = {*plan_secrets(args, env, executors=executors), *(v for _, v, _ in found)}
    out = list(args)
    for i, _, inline in found:
        out[i] = f"{inline}={REDACTED}" if inline else REDACTED
    if api_key:
        secrets.update((api_key, *api_key.split(",")))
    secrets.discard("")
    for i, tok in enumerate(out):
        name, eq, value = tok.partition("=")
        if copied_secret(tok, secrets):
            out[i] = REDACTED
        elif eq and name[:1] == "-" and copied_secret(value, secrets):
            out[i] = f"{name}={REDACTED}"
    return tuple(out), tuple(_redact_env_copy(e, secrets) for e in env)


def _every_value_hidden(args: Sequence[str]) -> tuple[str, ...]:
    return tuple(
        (f"{t.partition('=')[0]}={REDACTED}" if "=" in t else t) if t[:1] == "-" else REDACTED
        for t in args
    )


def redact_plan(
    plan: LaunchPlan, sources: Iterable[Source] = (), *, executors: Executors = BUILTIN
) -> LaunchPlan:
    """The plan as it may be shown: the key, key variables and key flags hidden, in the
    plan's own argv and env and in its copy of the spec's run_args.

    A secret's value is hidden too wherever a caller copied it (`copied_secret`): as the
    value of any variable (``--env OTHER=K`` beside ``--api-key-env``), and as the value of
    any flag that a layer above the engine set (`sources`: the plan's provenance; without it
    only the spec's run_args, all the caller's, are judged). The engine's own flags (its
    ``--host``, ``--port``, ``--model``) are derived from what is not secret and are left as
    they are, whatever a key happens to equal."""
    secrets = frozenset(plan_secrets(plan.args, plan.env, executors=executors))
    copies = _copied_options(sources, secrets)
    return msgspec.structs.replace(
        plan,
        spec=msgspec.structs.replace(
            plan.spec,
            run_args=tuple(
                REDACTED if copied_secret(t, secrets) else t
                for t in redact_args(plan.spec.run_args, executors=executors)
            ),
        ),
        api_key=REDACTED if plan.api_key else "",
        env=tuple(_redact_env_copy(e, secrets) for e in plan.env),
        args=_redact_arg_copies(redact_args(plan.args, executors=executors), copies),
    )


def secret_copies(
    args: Sequence[str], env: Iterable[str], *, executors: Executors = BUILTIN
) -> tuple[str, ...]:
    """Where a plan hands a secret to something that does not say it is one: the variables
    (``OTHER=K`` beside ``LLAMA_API_KEY=K``) and flags whose whole value is a copy of a key
    flag's or a secret variable's value. An output that writes values out (``plan --emit``)
    cannot hide them where they stand, so it refuses them."""
    secrets = frozenset(plan_secrets(args, env, executors=executors))
    keyed = {i for i, _, _ in _secret_values(args, executors)}
    where = [
        name
        for name, eq, value in (item.partition("=") for item in env)
        if eq and not is_secret_name(name) and copied_secret(value, secrets)
    ]
    for i, tok in enumerate(args):
        if i in keyed or i == 0:
            continue
        flag, eq, value = tok.partition("=")
        if eq and flag[:1] == "-" and copied_secret(value, secrets):
            where.append(flag)
        elif copied_secret(tok, secrets) and args[i - 1][:1] == "-":
            where.append(args[i - 1])
    return tuple(dict.fromkeys(where))


def copied_secret(value: str, secrets: Collection[str]) -> bool:
    """Whether `value` is one of `secrets`, whole or as an item of a comma-separated list (as
    llama-server reads a key list): compared whole, never searched as a substring, so a key
    ``1`` does not hide the ``1`` of ``127.0.0.1``."""
    return bool(value) and (value in secrets or any(p in secrets for p in value.split(",")))


def _redact_env_copy(item: str, secrets: Collection[str]) -> str:
    name, eq, value = item.partition("=")
    if eq and copied_secret(value, secrets):
        return f"{name}={REDACTED}"
    return redact_env(item)


def _copied_options(sources: Iterable[Source], secrets: Collection[str]) -> frozenset[str]:
    """The argv options (as `Source.text` spells them) set above the engine layer whose
    value is a copy of a secret."""
    out = set()
    for s in sources:
        if (
            s.what == "arg"
            and s.layer != ENGINE_LAYER
            and copied_secret(_arg_value(s.text), secrets)
        ):
            out.add(s.text)
    return frozenset(out)


def _arg_value(text: str) -> str:
    """The value in one argv source: an option's (`_value`), or a bare token's whole text.
    A token the flag table does not tie to its flag (the value after a mistyped
    ``--api-kee``) stands alone in the sources, and may still be a copy of a key."""
    return _value(text) if text[:1] == "-" else text


def _value(option: str) -> str:
    """The value of one option as `Source.text` spells it (``--flag V``, ``--flag=V``)."""
    first, sep, rest = option.partition(" ")
    if sep:
        return rest
    return first.partition("=")[2] if first[:1] == "-" else ""


def _redact_arg_copies(args: Sequence[str], copies: Collection[str]) -> tuple[str, ...]:
    out = list(args)
    for i, tok in enumerate(args):
        if tok in copies and tok[:1] != "-":  # a bare token
            out[i] = REDACTED
        elif tok in copies:  # --flag=V
            out[i] = f"{tok.partition('=')[0]}={REDACTED}"
        elif i + 1 < len(args) and f"{tok} {args[i + 1]}" in copies:
            out[i + 1] = REDACTED
    return tuple(out)


def redact_provenance(
    p: Provenance, secrets: Collection[str], *, executors: Executors = BUILTIN
) -> Provenance:
    """One provenance entry (``plan --explain``) as it may be shown: secrets hidden where
    they stand, and a copied secret's value hidden in any variable and in any flag set above
    the engine layer (as in `redact_plan`), in the entry and in what it replaced."""
    return msgspec.structs.replace(
        p,
        said=redact_said(p.said, secrets, executors=executors),
        replaced=tuple(redact_said(r, secrets, executors=executors) for r in p.replaced),
    )


def redact_said(s: Said, secrets: Collection[str], *, executors: Executors = BUILTIN) -> Said:
    """One layer's contribution with its secret hidden: a secret-named variable's value, a
    key flag's values, and (above the engine layer, whose flags are derived from what is not
    secret) any value that is a copy of one of `secrets`."""
    shown = _said_env(s, secrets) if s.what == "env" else _said_arg(s, secrets, executors)
    return s if shown == s.tokens else msgspec.structs.replace(s, tokens=shown)


def _said_env(s: Said, secrets: Collection[str]) -> tuple[str, ...]:
    name, value = s.tokens
    if value and (is_secret_name(name) or copied_secret(value, secrets)):
        return (name, REDACTED)
    return s.tokens


def _said_arg(s: Said, secrets: Collection[str], executors: Executors) -> tuple[str, ...]:
    copies = s.layer != ENGINE_LAYER
    first, values = s.tokens[0], s.tokens[1:]
    if values:
        copied = copies and (
            copied_secret(" ".join(values), secrets)
            or any(copied_secret(v, secrets) for v in values)
        )
        return (first, REDACTED) if copied or executors.is_secret_flag(first) else s.tokens
    name, eq, value = first.partition("=")
    if first[:1] == "-":
        hide = (
            eq
            and value
            and (executors.is_secret_flag(name) or (copies and copied_secret(value, secrets)))
        )
        return (f"{name}={REDACTED}",) if hide else s.tokens
    if copies and copied_secret(first, secrets):  # a bare token: the value of a mistyped flag
        return (REDACTED,)
    return s.tokens


def redact_config(cfg: Config, *, executors: Executors = BUILTIN) -> Config:
    """Override files as they may be shown: secret variables and key flags hidden, and a
    key's value wherever the files copy it (after a mistyped ``--api-kee``, in another
    variable), as `redact_plan` hides it in a plan. The key flags are those of `executors`
    (the ones the files were read with) and any flag whose name reads as a secret
    (``--sd-token``): an override file may name an executor the caller added."""
    overrides = [*cfg.engines.values(), *cfg.models.values()]
    secrets = frozenset(v for o in overrides for v in _override_secrets(o, cfg.env, executors))

    def env(m: dict[str, str]) -> dict[str, str]:
        return {
            n: (REDACTED if v and (is_secret_name(n) or copied_secret(v, secrets)) else v)
            for n, v in m.items()
        }

    def arg(tok: str) -> str:
        flag, eq, value = tok.partition("=")
        if tok[:1] == "-":
            return f"{flag}={REDACTED}" if eq and copied_secret(value, secrets) else tok
        return REDACTED if copied_secret(tok, secrets) else tok

    def over(o: Override) -> Override:
        shown, _ = redact_shown(o.args, executors=executors)
        return msgspec.structs.replace(o, args=tuple(arg(t) for t in shown), env=env(o.env))

    return msgspec.structs.replace(
        cfg,
        env=env(cfg.env),
        engines={k: over(o) for k, o in cfg.engines.items()},
        models={k: over(o) for k, o in cfg.models.items()},
    )


def _override_secrets(o: Override, env: dict[str, str], executors: Executors) -> Iterator[str]:
    variables = [f"{n}={x}" for n, x in (*env.items(), *o.env.items())]
    yield from plan_secrets(o.args, variables, executors=executors)
    yield from (v for _, v, _ in _secret_values_shown(o.args, executors))


SHORT_KEY: Final = 8
"""Keys shorter than this are redacted in free text only where they stand as a token."""

_NOT_WORD_BEFORE: Final = "(?<![A-Za-z0-9_])"
_NOT_WORD_AFTER: Final = "(?![A-Za-z0-9_])"


def plan_secrets(
    args: Sequence[str], env: Iterable[str], *, executors: Executors = BUILTIN
) -> tuple[str, ...]:
    """Every secret a plan hands its executor, as free text may quote it: the value of each
    key flag (``--api-key K``, ``--hf-token=K``) and of each secret-named variable
    (``LLAMA_API_KEY=K``, ``HF_TOKEN=K``), whole and split at commas (llama-server reads a
    comma-separated list of API keys)."""
    values = [value for _, value, _ in _secret_values(args, executors)]
    for item in env:
        name, eq, value = item.partition("=")
        if eq and is_secret_name(name):
            values.append(value)
    out = [*values, *(part for v in values if "," in v for part in v.split(","))]
    return tuple(dict.fromkeys(v for v in out if v))


def redaction_markers(
    args: Sequence[str], env: Iterable[str], *, executors: Executors = BUILTIN
) -> tuple[str, ...]:
    """Where a plan hands its executor the redaction marker instead of a secret: the key
    flags and secret-named variables whose value holds `REDACTED`. A plan printed for people
    (``plan --json``) carries the marker; launched as it is, the executor would take the
    literal ``<redacted>`` as its key, a key anyone can read in the saved file."""
    where = [
        inline if inline else args[i - 1]
        for i, value, inline in _secret_values(args, executors)
        if REDACTED in value
    ]
    for item in env:
        name, eq, value = item.partition("=")
        if eq and is_secret_name(name) and REDACTED in value:
            where.append(name)
    return tuple(dict.fromkeys(where))


class TextRedactor:
    """Hides keys in free text (an executor's log lines), where nothing says where a key
    stands. Built once per launch, applied per line.

    A key of `SHORT_KEY` characters or more is hidden wherever it occurs. A shorter one is
    hidden only where it stands as a token, not inside a word: neither neighbour is a letter,
    a digit or ``_``. So the key ``k`` turns ``Bearer k`` and ``key=k`` into
    ``Bearer <redacted>`` and ``key=<redacted>``, but leaves ``q4_k_m.gguf`` readable; a short
    key inside a longer word is shown, a guess that no word of a log line can make safe.
    """

    def __init__(self, secrets: Iterable[str]) -> None:
        keys = _longest_first(set(secrets))
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

    def text(self, text: str) -> str:
        """`text` with the keys hidden."""
        return self._text.sub(REDACTED, text) if self._text is not None else text

    def bytes(self, data: bytes) -> bytes:
        """`data`, which need not be valid UTF-8, with the keys hidden."""
        return self._bytes.sub(_REDACTED_BYTES, data) if self._bytes is not None else data


_REDACTED_BYTES: Final = REDACTED.encode()


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """`text` with the keys hidden, by `TextRedactor`'s rule: for free text only."""
    return TextRedactor(secrets).text(text)


def redact_bytes(data: bytes, secrets: Iterable[str]) -> bytes:
    """`redact_text` for raw output, which need not be valid UTF-8."""
    return TextRedactor(secrets).bytes(data)


def _longest_first(secrets: Iterable[str]) -> list[str]:
    # A key that contains another must go first, or the other's replacement leaves its rest.
    return sorted((s for s in secrets if s), key=len, reverse=True)


def refuse_redacted(plan: LaunchPlan, *, executors: Executors = BUILTIN) -> None:
    """Raise `PlanError` when the plan hands its executor the redaction marker as a secret
    (see `redaction_markers`); every launcher calls this before it starts anything."""
    where = redaction_markers(plan.args, plan.env, executors=executors)
    if not where:
        return
    source = f" (its key is in ${plan.key_env})" if plan.key_env else ""
    raise PlanError(
        f"the plan carries the redaction marker {REDACTED} in {', '.join(where)}{source}: "
        "it was saved for people to read and holds no key. Plan again with the key in its "
        "variable (--api-key-env VAR), or put the real value back before launching"
    )
