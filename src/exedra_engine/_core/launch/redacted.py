"""A plan saved for people, refused before launch: one that hands its executor the
redaction marker instead of a secret (`exedra_engine._core.secrets.redaction_markers`). Pure."""

from __future__ import annotations

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.secrets import REDACTED, redaction_markers
from exedra_engine.errors import PlanError


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
