"""The explanation values as a repr or rich may show them: ``plan --explain``'s data
(`Source`, `Said`, `Provenance`, `Explained`) with its secrets hidden by the walker. Pure.

Without a plan (a `Source` or a `Said` alone) only what the table decides by itself is
hidden: key flags and their neighbours, secret-named variables, URL credentials, key shapes.
`Explained` carries its plan, so a key's copies are hidden there too, as ``plan --explain``
hides them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.secrets.hide import TextRedactor
from exedra_engine._core.secrets.shown import redact_plan, redact_provenance, said_tokens_shown
from exedra_engine._core.secrets.table import SHORT_KEY
from exedra_engine._core.secrets.walk import plan_secrets

if TYPE_CHECKING:
    from exedra_engine._core.config.findings import Finding
    from exedra_engine._core.plan.layers import Source
    from exedra_engine._core.plan.planner import Explained


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


def shown_findings(findings: tuple[Finding, ...], secrets: Collection[str]) -> tuple[Finding, ...]:
    """Findings with every long key (`SHORT_KEY` characters or more) and everything secret by
    its look hidden: they quote the tokens they judge as free text (a caller's
    ``--arg=--temp=KEY`` is worded back)."""
    hide = TextRedactor(k for k in secrets if len(k) >= SHORT_KEY)
    return tuple(
        msgspec.structs.replace(
            f,
            token=hide.text(f.token),
            message=hide.text(f.message),
            suggestion=hide.text(f.suggestion),
        )
        for f in findings
    )


def shown_explained(e: Explained, *, executors: Executors = BUILTIN) -> dict[str, Any]:
    """`Explained`'s fields as its repr shows them: the plan as printed, and its sources,
    provenance and findings with the plan's secrets hidden."""
    secrets = frozenset(plan_secrets(e.plan.args, e.plan.env, executors=executors))
    return {
        "plan": redact_plan(e.plan, e.sources, executors=executors),
        "sources": tuple(shown_source(s, secrets, executors=executors) for s in e.sources),
        "findings": shown_findings(e.findings, secrets),
        "memory": e.memory,
        "provenance": tuple(
            redact_provenance(p, secrets, executors=executors) for p in e.provenance
        ),
    }
