"""The API key of an emitted plan: never in argv or env, only in a file the target mounts
(a Secret, a Podman secret, a systemd credential). Pure."""

from __future__ import annotations

from collections.abc import Sequence

from exedra_engine._core.emit import names
from exedra_engine._core.emit.options import EmitOptions, Origin, chosen
from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.endpoint import env_dict
from exedra_engine._core.plan.launch_plan import LaunchPlan, read_with
from exedra_engine._core.secrets import is_secret_name
from exedra_engine._core.targets import Target
from exedra_engine.errors import EmitError, EngineError

KEY_DIR = "/run/secrets/exedra"
"""Where containers see the key (a directory: a Secret volume mounts one)."""
KEY_NAME = "api-key"
"""The key's file name: the Secret's key, the credential's name."""


def key_origin(p: ExecutorProfile, keyed: bool) -> tuple[Origin, ...]:
    if keyed and not p.key_file_flag:
        raise EmitError(f"{p.binary} reads no key file: a keyed plan cannot be emitted without it")
    if not keyed:
        return ()
    why = f"the plan is keyed; the key comes from a file given to {p.key_file_flag}, never from "
    return (Origin(field="key", value="a file", source="plan", why=why + "env or args"),)


def secret_origins(
    keyed: bool, target: Target, options: EmitOptions, names_: tuple[str, str]
) -> tuple[Origin, ...]:
    secret, key_file = names_
    if not keyed:
        return ()
    if target is not Target.SYSTEMD:
        names.subdomain(secret, "secret name")
        return (chosen("secret", secret, options.secret, "NAME-api-key"),)
    why = "/etc/exedra/NAME.key, loaded as a credential"
    return (chosen("key file", key_file, options.key_file, why),)


def key_vars(p: ExecutorProfile) -> frozenset[str]:
    """The variables that give the executor its key (the key variable, the key-file one)."""
    names = {p.key_env} if p.key_env else set()
    for flag in (p.key_flag, p.key_file_flag):
        f = p.flags.flags.get(flag)
        if f is not None:
            names.update(f.env)
    return frozenset(n for n in names if n)


def without_keys(
    p: ExecutorProfile, plan: LaunchPlan, items: Sequence[Item]
) -> tuple[bool, tuple[Item, ...]]:
    """Whether the plan is keyed, and its argv's `items` without key flags."""
    keyed = bool(plan.api_key)
    out: list[Item] = []
    for it in items:
        if it.key is not None and it.key in p.key_flags:
            if it.key in p.secret_flags and it.key != p.key_flag:
                raise EmitError(secret_flag_problem(it.tokens[0]))
            keyed = True
            continue
        out.append(it)
    return keyed or bool(key_vars(p) & set(env_dict(plan.env))), tuple(out)


def plan_is_keyed(plan: LaunchPlan, p: ExecutorProfile) -> bool:
    """Whether the plan (for the executor of `p`) requires an API key (its own, or one a
    key flag or variable sets)."""
    if plan.api_key or key_vars(p) & set(env_dict(plan.env)):
        return True
    try:
        items = read_with(plan, p).items
    except EngineError:
        return False
    return any(it.key in p.key_flags for it in items if it.key is not None)


def env_without_keys(p: ExecutorProfile, plan: LaunchPlan) -> tuple[tuple[str, str], ...]:
    keys = key_vars(p)
    out = []
    for name, value in env_dict(plan.env).items():
        if name in keys:
            continue
        if is_secret_name(name) and value:
            raise EmitError(secret_env_problem(name))
        out.append((name, value))
    return tuple(out)


def secret_flag_problem(flag: str) -> str:
    """Why a plan that passes the secret flag `flag` (with its value) cannot be emitted."""
    return (
        f"the plan passes {flag}, a secret the output would have to carry; remove it from the plan"
    )


def secret_env_problem(name: str) -> str:
    """Why a plan whose env sets the secret-named variable `name` cannot be emitted."""
    return (
        f"the plan's env sets {name}, a secret the output would have to carry; "
        "remove it from the plan and give it to the target yourself"
    )
