"""What a llama.cpp router of a group serves, and what it cannot, said before anything starts
(``launch --group FILE --router``, ``plan --group FILE --emit router``). Pure.

The router starts llama-server children only (``--models-preset``): a member of another
executor (whisper-server) is no router child. It is not dropped silently: it runs beside the
router, on its own port, and the lines here say so, naming it and its executor."""

from __future__ import annotations

from exedra_engine._core.emit.group.router import RouterPreset
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.values import GroupPlan


def beside_router(group: GroupPlan, preset: RouterPreset) -> tuple[str, ...]:
    """The ids of `group`'s members the router does not serve, in member order."""
    return tuple(i for i in group.ids if i not in preset.members)


def served_text(preset: RouterPreset) -> str:
    """What the router serves: each member by the id requests name it by (``"model"``)."""
    return (
        f"{', '.join(preset.members)}: each loads on its first request naming it "
        f'("model": "{preset.members[0]}"), at most {preset.models_max} at once (--models-max)'
    )


def beside_texts(
    group: GroupPlan, preset: RouterPreset, *, executors: Executors = BUILTIN
) -> tuple[str, ...]:
    """One text per member the router cannot serve: the member, its executor, its address."""
    out = []
    for member in beside_router(group, preset):
        plan = group.plan_of(member)
        binary = executors.profile(plan.spec.kind).binary
        out.append(
            f"{member} ({binary}) is not a llama.cpp router child: it runs on its own, "
            f"beside the router, at {plan.url}"
        )
    return tuple(out)
