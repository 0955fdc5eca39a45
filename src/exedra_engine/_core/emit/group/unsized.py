"""What a group plan could not size, said before its files are emitted: a member with no
memory share and no memory plan of its own gets no memory limit (``MemoryMax=``,
``Memory=``, a Kubernetes request) and counts as nothing in the router's ``--models-max``
and llama-swap's groups. That happens when the group was planned where the member's model
is absent (a plan for another host) or the host's memory was unknown. Pure."""

from __future__ import annotations

from exedra_engine._core.group.values import GroupPlan


def unsized_members(group: GroupPlan) -> tuple[tuple[str, str], ...]:
    """(member id, why) for each member whose files get no memory limit, in member order."""
    out: list[tuple[str, str]] = []
    for share, plan in zip(group.shares, group.plans, strict=True):
        if share.memory or (plan.memory is not None and plan.memory.host.total > 0):
            continue
        if share.resident:
            why = "the host's memory was unknown when the group was planned"
        else:
            why = (
                f"its model {plan.spec.path} was not read when the group was planned (absent "
                "there?), so its memory was not planned: plan the group where the model is"
            )
        out.append((share.id, why))
    return tuple(out)
