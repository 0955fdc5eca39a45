"""What a check hands back: `Finding` (one thing an override does otherwise than it says),
and `TableOrigin` (which flag table judged a kind).

The codes of a finding (its ``code``):

==================  ========  ===========================================================
code                severity  what
==================  ========  ===========================================================
unknown-flag        error     a flag the executor does not know (with a did-you-mean)
wrong-kind          error     a flag or variable of another executor kind
missing-value       error     a flag that takes a value, at the end of its list
value-is-flag       error     a flag that takes a value, followed by another flag
stray-value         error     a value that follows no flag taking one
equals-form         warning   ``--flag=value``: the planner splits it, the executor refuses
                              it (an error for a flag that takes no single value)
contradicts         error     a flag set on and off, or to two values, in one layer
unknown-env         error     a variable shaped like the executor's own that it does not read
bad-value           error     a value the executor refuses or misreads (``--ctx-size 16k``)
bad-model-id        error     a ``models:`` key that no model can have as its id
sets-endpoint       warning   an override that sets the bind address or the port
sets-api-key        warning   an override that sets an API key
invalid-file        error     a file the loader refuses (from `config --check`)
fitter-off          warning   an override that sets ``-ngl``, ``-ts``, ``-ot`` or a row or
                              tensor split mode: llama.cpp's own memory fitting is then off
unbounded-cache     warning   ``--cache-ram -1``: a host prompt cache without a size limit
==================  ========  ===========================================================

A plan's findings about the model itself are in `exedra_engine._core.plan.model_findings`. A
``note`` is something to know, never a failure: ``--strict`` passes it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Literal

import msgspec

from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.secrets import SHORT_KEY, TextRedactor
from exedra_engine._core.struct import Value

Severity = Literal["error", "warning", "note"]


class Finding(Value, frozen=True, kw_only=True):
    """One thing an override does otherwise than it says. Every field is always present in
    its JSON, in this order, so CI jobs can rely on the shape."""

    severity: Severity
    code: str
    """Stable identifier (see the module docstring)."""
    file: str = ""
    """The override file ("" for the caller's args and a model's run_args)."""
    line: int = 0
    """Line in `file`, from 1; 0 when not known."""
    path: str
    """Field path: ``$.engines.llama.args[2]``, or ``caller args[0]``."""
    token: str
    """The offending token or variable name, as written (a key flag's value is never shown)."""
    message: str
    suggestion: str = ""
    """What to write instead, when one thing is likely (``--ctx-size`` for ``--ctx-szie``)."""

    @property
    def where(self) -> str:
        """``file:line: path`` as far as known."""
        loc = f"{self.file}:{self.line}" if self.file and self.line else self.file
        return f"{loc}: {self.path}" if loc else self.path


def has_errors(findings: Sequence[Finding], *, strict: bool = False) -> bool:
    """Whether any finding fails a check: an error, or with `strict` any but a note."""
    return any(f.severity == "error" or (strict and f.severity != "note") for f in findings)


def failing(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    """The findings `--strict` refuses: all but the notes."""
    return tuple(f for f in findings if f.severity != "note")


class TableOrigin(Value, frozen=True, kw_only=True, omit_defaults=True):
    """Which flag table a kind was judged by: the one bundled with the library, or the one an
    installed binary's own ``--help`` gave."""

    kind: str
    binary: str
    """The executor's name (``llama-server``)."""
    source: Literal["bundled", "binary", "recorded"]
    """``recorded``: the flags another host's probe recorded in its hardware file."""
    path: str = ""
    """The binary whose help was read ("" for the bundled table)."""
    version: str = ""
    """The binary's version, or the build the bundled table was made from; "" if unknown."""
    note: str = ""
    """Why the bundled table was used although a binary was named (its help gave no flags...);
    for a recorded table, where it was recorded."""

    def describe(self) -> str:
        """One line for humans: ``llama-server: /usr/bin/llama-server --help, version b6000``."""
        if self.source != "bundled":
            said = f"{self.binary}: {self.path} --help, version {self.version or 'not stated'}"
            return f"{said}, as {self.note}" if self.note else said
        made = f", made from {self.version}" if self.version else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.binary}: the bundled table{made}{note}"


def bundled_origin(p: ExecutorProfile, note: str = "") -> TableOrigin:
    """The origin of `p`'s bundled table."""
    return TableOrigin(
        kind=p.kind, binary=p.binary, source="bundled", version=p.table_version, note=note
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
