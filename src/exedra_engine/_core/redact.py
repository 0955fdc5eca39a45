"""Keeping secrets out of what the library and its command line print. Pure.

Secrets are redacted where they stand, never by searching every string for every key (a
one-character key ``1`` would otherwise turn ``127.0.0.1`` into ``<redacted>27.0.0.<redacted>``):

- the value of a key flag (an executor profile's ``secret_flags``), in both the
  ``--flag value`` and the ``--flag=value`` forms;
- the value of a variable whose name says it is a secret (`is_secret_name`: ``LLAMA_API_KEY``,
  ``HF_TOKEN``, ``*_PASSWORD``...).

Only free text that has no structure, an executor's log lines, is searched for the keys it
may carry (`redact_text`, `redact_bytes`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING

import msgspec

from exedra_engine._core.executors import is_secret_flag

if TYPE_CHECKING:
    from exedra_engine._core.values import Config, LaunchPlan, Override

REDACTED = "<redacted>"
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret."""
    upper = name.upper()
    return any(w in upper for w in _SECRET_WORDS)


def redact_env(item: str, secrets: Iterable[str] = ()) -> str:
    """``NAME=VALUE`` with the value hidden when the name says it is a secret.

    `secrets` is accepted for compatibility and ignored: values are never searched.
    """
    del secrets
    name, sep, value = item.partition("=")
    if sep and value and is_secret_name(name):
        return f"{name}={REDACTED}"
    return item


def redact_args(args: Sequence[str]) -> tuple[str, ...]:
    """`args` with the value of every key flag hidden (``--api-key K``, ``--api-key=K``)."""
    out = list(args)
    for i, tok in enumerate(args):  # decided on the originals: ``--api-key --api-key K``
        if is_secret_flag(tok):
            if i + 1 < len(out):
                out[i + 1] = REDACTED
        elif tok[:1] == "-":
            name, sep, value = tok.partition("=")
            if sep and value and is_secret_flag(name):
                out[i] = f"{name}={REDACTED}"
    return tuple(out)


def redact_option(text: str) -> str:
    """One argv option as `exedra_engine._core.layers.Source` shows it (its tokens joined by
    spaces) with a key flag's value hidden."""
    first, sep, _ = text.partition(" ")
    name, eq, value = first.partition("=")
    if is_secret_flag(name):
        if sep:
            return f"{first} {REDACTED}" if not eq else f"{name}={REDACTED} {REDACTED}"
        return f"{name}={REDACTED}" if eq and value else text
    return text


def redact_said(entry: str, layers: Collection[str]) -> str:
    """An ``overrode`` entry (``layer: --flag value`` or ``layer: NAME=VALUE``) with its
    secret value hidden. `layers` are the layer names that may open it; an entry that opens
    with none of them is hidden whole rather than guessed at."""
    for layer in sorted(layers, key=len, reverse=True):
        if entry.startswith(layer + ": "):
            what = entry[len(layer) + 2 :]
            shown = redact_option(what) if what[:1] == "-" else redact_env(what)
            return f"{layer}: {shown}"
    return REDACTED


def redact_plan(plan: LaunchPlan) -> LaunchPlan:
    """The plan as it may be shown: the key, key variables and key flags hidden, in the
    plan's own argv and env and in its copy of the spec's run_args."""
    return msgspec.structs.replace(
        plan,
        spec=msgspec.structs.replace(plan.spec, run_args=redact_args(plan.spec.run_args)),
        api_key=REDACTED if plan.api_key else "",
        env=tuple(redact_env(e) for e in plan.env),
        args=redact_args(plan.args),
    )


def redact_config(cfg: Config) -> Config:
    """Override files as they may be shown: secret variables and key flags hidden."""

    def env(m: dict[str, str]) -> dict[str, str]:
        return {n: (REDACTED if v and is_secret_name(n) else v) for n, v in m.items()}

    def over(o: Override) -> Override:
        return msgspec.structs.replace(o, args=redact_args(o.args), env=env(o.env))

    return msgspec.structs.replace(
        cfg,
        env=env(cfg.env),
        engines={k: over(o) for k, o in cfg.engines.items()},
        models={k: over(o) for k, o in cfg.models.items()},
    )


def redact_text(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret replaced: for free text only (log lines),
    where nothing says where a key stands."""
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
