"""Where each part of a plan came from, as ``plan --explain`` and ``plan --group --explain``
show it: the layers' provenance with the plan's secrets hidden, one line each."""

from __future__ import annotations

from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.plan.explained import Explained
from exedra_engine._core.plan.provenance import Source, redact_provenance
from exedra_engine._core.secrets import plan_secrets
from exedra_engine.cli.render import shown


def shown_sources(e: Explained, show_secrets: bool, executors: Executors) -> list[Source]:
    """`e`'s sources as shown: every secret hidden where it stands, unless `show_secrets`."""
    if show_secrets:
        return list(e.sources)
    # Redacted as data (each token where it stands), then worded.
    secrets = frozenset(plan_secrets(e.plan.args, e.plan.env, executors=executors))
    return [redact_provenance(p, secrets, executors=executors).source() for p in e.provenance]


def source_lines(sources: list[Source], indent: str = "  ") -> list[str]:
    """Where each part of a plan came from, as ``plan --explain`` shows it: a heading, then
    one line per argv option or env variable and the layers it overrode (``plan --group
    --explain`` shows each member's the same way, indented under it)."""
    out = [
        "where each part came from (lowest layer first: run_args, engine, config env, "
        "config engines, config models, caller):"
    ]
    for s in sources:
        out.append(f"{indent}{s.what:<3}  {shown(s.text):<40}  {shown(s.layer)}")
        out += [f"{indent}{'':<3}  {'':<40}    overrode {shown(o)}" for o in s.overrode]
    return out
