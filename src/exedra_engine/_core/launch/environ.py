"""The executor's environment, from ours and the plan's. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.plan.endpoint import env_dict
from exedra_engine._core.plan.launch_plan import LaunchPlan


def child_environment(
    plan: LaunchPlan, base: Mapping[str, str], *, executors: Executors = BUILTIN
) -> dict[str, str]:
    """`base` without the variables the executor reads that the plan does not set, plus the
    plan's env: only the plan decides the endpoint (a stray ``LLAMA_ARG_PORT`` in `base`
    cannot move the server; the profile's ``env_prefix`` and flag table say which variables
    the executor reads)."""
    env = dict(base)
    planned = env_dict(plan.env)
    profile = executors.profile(plan.spec.kind)
    read = profile.flags.env_names | {profile.key_env} - {""}
    prefix = profile.env_prefix
    for name in list(env):
        if name not in planned and (name in read or (prefix and name.startswith(prefix))):
            del env[name]
    env.update(planned)
    return env
