"""What the checks of every target share: the emitted argv and env read back as the executor
reads them (over its image's env), readiness URLs, and small readers. Pure.

Each target's own checks live beside its writer (`k8s.check_k8s`, `systemd.check_systemd`,
`quadlet.check_quadlet`); `checks.check_files` runs them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from exedra_engine._core.emit.formats import ini
from exedra_engine._core.emit.keys import key_vars, plan_is_keyed
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.endpoint import env_dict, resolve_for
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.secrets import is_secret_name
from exedra_engine.errors import EngineError


def argv_problems(
    p: ExecutorProfile,
    plan: LaunchPlan,
    args: Sequence[str],
    env: Sequence[str],
    key_dirs: Sequence[str],
) -> list[str]:
    try:
        items = p.flags.split_items(args, "args")
    except EngineError as e:
        return [str(e)]
    out: list[str] = []
    key_files = []
    for it in items:
        if it.key is not None and it.key in p.key_flags:
            if it.key == p.key_file_flag and it.values:
                key_files.append(it.values[0])
            else:
                out.append(f"args pass {it.tokens[0]} with a value: a key in plain text")
    envmap = env_dict(env)
    out += env_problems(p, envmap)
    if plan_is_keyed(plan, p) and not key_files:
        out.append(f"the plan is keyed but the args give no {p.key_file_flag}: no key is required")
    out += [
        f"{p.key_file_flag} {f} is not in a mounted secret"
        for f in key_files
        if not any(f.startswith(d.rstrip("/") + "/") for d in key_dirs)
    ]
    return out + endpoint_problems(p, plan, args, envmap)


def env_problems(p: ExecutorProfile, envmap: Mapping[str, str]) -> list[str]:
    out = []
    for name, value in envmap.items():
        if name in key_vars(p) and value:
            out.append(f"env sets {name}: the key must come from the mounted file only")
        elif is_secret_name(name) and value:
            out.append(f"env sets {name}, a secret-named variable, in plain text")
    return out


def endpoint_problems(
    p: ExecutorProfile, plan: LaunchPlan, args: Sequence[str], envmap: Mapping[str, str]
) -> list[str]:
    try:
        r = resolve_for(p, args, envmap)
    except EngineError as e:
        return [f"the argv and env do not resolve: {e}"]
    out = []
    if r.port != plan.port:
        out.append(f"the executor would listen on port {r.port}, not the plan's {plan.port}")
    if r.host != plan.host:
        out.append(f"the executor would bind {r.host}, not the plan's {plan.host}")
    if r.api_keys:
        out.append("the argv and env carry an API key")
    return out


def url_problems(what: str, url: str, plan: LaunchPlan) -> list[str]:
    m = re.fullmatch(r"https?://(\[[^\]]*\]|[^/:]*):(\d+)(/.*)?", url)
    if m is None:
        return [f"{what} {url!r} is not an http URL with a port"]
    out = []
    if int(m.group(2)) != plan.port:
        out.append(f"{what} asks port {m.group(2)}, not the plan's {plan.port}")
    if (m.group(3) or "/") != plan.ready:
        out.append(f"{what} asks {m.group(3) or '/'}, not the plan's ready path {plan.ready}")
    return out


def words(value: str, specifiers: Mapping[str, str]) -> list[str]:
    return ini.exec_argv(value, specifiers)


def env_words(value: str) -> list[str]:
    return ini.split_words(ini.resolve_specifiers(value, {}))


def get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def port_of(value: Any, named: Mapping[str, int]) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return named.get(value)
    return None


def is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535
