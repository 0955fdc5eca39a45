"""A group member as a Kubernetes Deployment runs it: on a node the scheduler picks, not on
the host the group was planned on. Pure.

- Its CPU ids mean nothing there: the flags that pin the executor to this host's CPUs (the
  profile's CPU range, mask and strict placement, which the group planner adds) are dropped;
  its threads are kept, and the share's CPUs become the container's CPU request.
- The scheduler reserves what the member needs at its peak: the single emitter's request
  (its memory plan), else the resident peak the group planner estimated for it
  (whisper-server's, from its file), and the share only when neither is known.
"""

from __future__ import annotations

import msgspec

from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.group.values import MemberShare
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.targets import Target


def deployed_plan(plan: LaunchPlan, target: Target, executors: Executors) -> LaunchPlan:
    """`plan` as `target` runs it: for Kubernetes without the CPU pinning flags (`unpinned`),
    else as planned."""
    return unpinned(plan, executors) if target is Target.K8S else plan


def unpinned(plan: LaunchPlan, executors: Executors) -> LaunchPlan:
    """`plan` without the flags that pin its executor to CPU ids (``--cpu-range 0-0
    --cpu-strict 1``), in either spelling (``FLAG VALUE``, ``FLAG=VALUE``)."""
    p = executors.profile(plan.spec.kind)
    flags = {f for f in (p.cpu_range_flag, p.cpu_mask_flag, p.cpu_strict_flag) if f}
    if not flags:
        return plan
    args: list[str] = []
    skip = False
    for arg in plan.args:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        elif arg.partition("=")[0] not in flags:
            args.append(arg)
    if len(args) == len(plan.args):
        return plan
    return msgspec.structs.replace(plan, args=tuple(args))


def memory_request(plan: LaunchPlan, share: MemberShare) -> int:
    """Bytes the member's container requests: its planned peak as the module says."""
    if plan.memory is not None and plan.memory.host.total > 0:
        return min(plan.memory.host.total, share.memory or plan.memory.host.total)
    return share.resident or share.memory


def share_cpus(share: MemberShare) -> int:
    """CPUs the member's container requests (and is limited to): its threads, else the
    number of CPUs it was given (0: none set)."""
    return share.threads or len(share.cpus)
