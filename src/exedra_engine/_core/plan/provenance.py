"""Provenance as data: which layer said each argv item or variable of a plan (`Said`,
`Provenance`), and ``plan --explain``'s wording of it (`Source`), each with its secrets
hidden as its repr shows it. Pure.

Without a plan (a `Source` or a `Said` alone) only what the secret table decides by itself
is hidden: key flags and their neighbours, secret-named variables, URL credentials, key
shapes. Given `secrets` (a plan's, `exedra_engine._core.secrets.plan_secrets`), a key's
copies are hidden too, as ``plan --explain`` hides them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.secrets import said_tokens_shown
from exedra_engine._core.struct import Value


class Source(Value, frozen=True, kw_only=True):
    """Where one final argv option or env variable came from, and what it replaced, as
    ``plan --explain`` shows it (rendered from a `Provenance`)."""

    what: Literal["arg", "env"]
    text: str
    """The option's tokens joined by spaces, or ``NAME=VALUE``."""
    layer: str
    overrode: tuple[str, ...] = ()
    """``layer: text`` of every contribution it replaced."""
    key: str = ""
    """The flag's canonical key (``--ctx-size`` for ``-c 8``) or the variable's name; "" for
    a token the flag table does not know."""

    def shown_fields(self) -> dict[str, Any]:
        return Value.shown_fields(shown_source(self))

    def __repr__(self) -> str:
        return self.shown_repr()


class Said(Value, frozen=True, kw_only=True):
    """One contribution of a layer: an argv item or a variable."""

    layer: str
    what: Literal["arg", "env"]
    tokens: tuple[str, ...]
    """An item's tokens (``--ctx-size``, ``8192``), or a variable's (name, value)."""
    at: int = -1
    """Where the item's first token stands in its layer's args (-1 for a variable)."""

    @property
    def text(self) -> str:
        """As `Source.text` spells it."""
        return " ".join(self.tokens) if self.what == "arg" else "=".join(self.tokens)

    def shown_fields(self) -> dict[str, Any]:
        return Value.shown_fields(redact_said(self, ()))

    def __repr__(self) -> str:
        return self.shown_repr()


class Provenance(Value, frozen=True, kw_only=True):
    """Provenance as data: which layer set one final argv item or variable, and what it
    replaced."""

    said: Said
    key: str | None = None
    """The flag's canonical key, or the variable's name; None for a token the table does not
    know."""
    replaced: tuple[Said, ...] = ()

    def shown_fields(self) -> dict[str, Any]:
        return Value.shown_fields(redact_provenance(self, ()))

    def __repr__(self) -> str:
        return self.shown_repr()

    def source(self) -> Source:
        """The entry ``plan --explain`` shows."""
        s = self.said
        over = tuple(f"{r.layer}: {r.text}" for r in self.replaced)
        return Source(what=s.what, text=s.text, layer=s.layer, overrode=over, key=self.key or "")


def redact_provenance(
    p: Provenance, secrets: Collection[str], *, executors: Executors = BUILTIN
) -> Provenance:
    """One provenance entry (``plan --explain``) as it may be shown: secrets hidden where
    they stand, and a secret's value hidden in any variable and in any flag set above the
    engine layer (as in `redact_plan`), in the entry and in what it replaced."""
    return msgspec.structs.replace(
        p,
        said=redact_said(p.said, secrets, executors=executors),
        replaced=tuple(redact_said(r, secrets, executors=executors) for r in p.replaced),
    )


def redact_said(s: Said, secrets: Collection[str], *, executors: Executors = BUILTIN) -> Said:
    """One layer's contribution with its secret hidden: a secret-named variable's value, a
    key flag's values, and (above the engine layer, whose flags are derived from what is not
    secret) any value that holds one of `secrets` or a secret by its look."""
    shown = said_tokens_shown(s.layer, s.what, s.tokens, secrets, executors=executors)
    return s if shown == s.tokens else msgspec.structs.replace(s, tokens=shown)


def _shown_text(layer: str, text: str, what: str, secrets: Collection[str], ex: Executors) -> str:
    # `Said.text` of the contribution, hidden: its tokens as `Said` holds them, joined back.
    if what == "env":
        name, _, value = text.partition("=")
        return "=".join(said_tokens_shown(layer, "env", (name, value), secrets, executors=ex))
    tokens = tuple(text.split(" "))
    return " ".join(said_tokens_shown(layer, "arg", tokens, secrets, executors=ex))


def shown_source(
    s: Source, secrets: Collection[str] = (), *, executors: Executors = BUILTIN
) -> Source:
    """One ``--explain`` entry with its secrets hidden, in its text and in what it replaced."""

    def over(entry: str) -> str:
        layer, sep, text = entry.partition(": ")
        if not sep:
            return entry
        what = "arg" if text[:1] == "-" or "=" not in text else "env"
        return f"{layer}: {_shown_text(layer, text, what, secrets, executors)}"

    return msgspec.structs.replace(
        s,
        text=_shown_text(s.layer, s.text, s.what, secrets, executors),
        overrode=tuple(over(o) for o in s.overrode),
    )
