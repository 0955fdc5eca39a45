"""The host's facts `exedra_engine._core.emit.reach` judges: the mode of every directory on
the way to a path a unit names, and of the file itself, links followed."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping

from exedra_engine._core.emit.reach import (
    PathFacts,
    PathStep,
    Role,
    container_reach_problems,
    reach_problems,
    unit_paths,
)
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.targets import Target


def unreachable(
    plan: LaunchPlan, target: Target, files: Mapping[str, str], executors: Executors
) -> list[str]:
    """What a systemd unit of `files` names that its user cannot reach on this host (the
    executor, the waiter, a model: `exedra_engine._core.emit.reach`), or what a Quadlet
    container's ``User=`` cannot read of the models mounted into it; paths absent here are
    not judged. Kubernetes runs what its image holds, with the models from a volume."""
    if target is Target.QUADLET:
        users = [
            line.partition("=")[2].strip()
            for text in files.values()
            for line in text.splitlines()
            if line.startswith("User=")
        ]
        models = [path_facts("model", f.path) for f in plan.files]
        return container_reach_problems(models, users[-1]) if users else []
    if target is not Target.SYSTEMD:
        return []
    profile = executors.profile(plan.spec.kind)
    out = []
    for text in files.values():
        facts = [path_facts(role, path) for role, path in unit_paths(text, profile)]
        out += reach_problems(text, facts)
    return out


def path_facts(
    role: Role,
    path: str,
    *,
    stat_path: Callable[[str], os.stat_result] = os.stat,
    realpath: Callable[[str], str] = os.path.realpath,
) -> PathFacts:
    """`PathFacts` of `path` on this host: each directory of the path as written and of its
    target (a link's own mode grants nothing), then the target itself; no steps when the
    path does not exist or cannot be looked at. `stat_path` and `realpath` are the port."""
    if not os.path.isabs(path) or "\0" in path:
        return PathFacts(role=role, path=path)
    try:
        real = realpath(path)
        steps: dict[str, int] = {}
        for p in (path, real):
            for d in _parents(p):
                if d not in steps:
                    steps[d] = stat_path(d).st_mode
        steps.pop(real, None)
        last = stat_path(real).st_mode
    except (OSError, ValueError):
        return PathFacts(role=role, path=path)
    dirs = [PathStep(path=d, mode=m) for d, m in steps.items() if stat.S_ISDIR(m)]
    return PathFacts(role=role, path=path, real=real, steps=(*dirs, PathStep(path=real, mode=last)))


def _parents(path: str) -> list[str]:
    """``/``, ``/a``, ``/a/b`` for ``/a/b/c``: the directories entered on the way."""
    out = ["/"]
    parts = [p for p in path.split("/") if p]
    for i in range(1, len(parts)):
        out.append("/" + "/".join(parts[:i]))
    return out
