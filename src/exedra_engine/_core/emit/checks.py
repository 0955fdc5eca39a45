"""Semantic checks of emitted (or edited) files against the plan they are meant to run.

A schema check passes RamaLama's invalid GPU names and a key in plain text; these checks read
the files the way their engine and the executor will, and list what is wrong:

- resource names are qualified (``nvidia.com/gpu``), GPUs only in limits (requests equal);
- every probe, health check and readiness wait asks the plan's ready path on the plan's port;
- ports agree across the container, the Service, the probes and the published port;
- the argv and env, read back as the executor reads them (over its image's env), listen
  where the plan says, and the key's only source is the mounted file;
- no secret text anywhere: no key flag with a value, no key variable, no secret-named
  variable with a value, no Secret object, no redaction marker, no known key.

Each target's own checks are in `exedra_engine._core.emit.formats` (`k8s_check.check_k8s`,
`systemd.check_systemd`, `quadlet.check_quadlet`, sharing `readback`); `check_files` runs
them, and `emit` runs it on every file it produces, so no file is handed out that these
checks reject.

Pure: the caller reads the files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from exedra_engine._core.emit.keys import secret_env_problem, secret_flag_problem
from exedra_engine._core.emit.ready import ready_problem
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.plan.endpoint import env_dict
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.secrets import (
    REDACTED,
    SHORT_KEY,
    is_secret_name,
    looks_secret,
    plan_secrets,
    secret_copies,
)
from exedra_engine._core.secrets.walk import secret_values
from exedra_engine._core.targets import Target


def check_files(
    plan: LaunchPlan,
    target: Target,
    files: Mapping[str, str],
    secrets: Sequence[str] = (),
    *,
    executors: Executors = BUILTIN,
) -> list[str]:
    """What is wrong with `files` as a deployment of `plan` on `target` ([] if nothing).
    `secrets` are key texts that must appear nowhere (the plan's own key, when known);
    `executors` are those the plan's kind is looked up in."""
    p = executors.profile(plan.spec.kind)
    problems: list[str] = _plan_problems(p, plan)
    keys = {*secrets, plan.api_key, *plan_secrets(plan.args, plan.env, executors=executors)}
    for name, text in sorted(files.items()):
        problems += text_problems(name, text, keys)
    # Each target's checks sit beside its writer; loaded when used, as the writers are.
    from exedra_engine._core.emit.formats.k8s_check import check_k8s
    from exedra_engine._core.emit.formats.quadlet import check_quadlet
    from exedra_engine._core.emit.formats.systemd import check_systemd

    check = {Target.K8S: check_k8s, Target.SYSTEMD: check_systemd, Target.QUADLET: check_quadlet}[
        target
    ]
    for name, text in sorted(files.items()):
        problems += [f"{name}: {x}" for x in check(plan, text, p)]
    return problems


def text_problems(name: str, text: str, keys: Iterable[str]) -> list[str]:
    """What secret the file `name` holding `text` carries in the clear: the redaction marker
    (a key stood there), one of `keys` (the plan's key and every secret it hands its
    executor: `plan_secrets`), or a secret by its look (a URL's credentials, a key shape)."""
    problems = []
    known = [_standing(k) for k in keys if k and k != REDACTED]
    if REDACTED in text:
        problems.append(f"{name}: carries the redaction marker {REDACTED}: a key stood there")
    if any(k.search(text) for k in known):
        problems.append(f"{name}: carries the API key in plain text")
    if looks_secret(text):
        problems.append(
            f"{name}: carries a secret in plain text (a URL's credentials or a key-shaped "
            "value): give it to the unit from a secret or key file instead"
        )
    return problems


def copies_problem(copies: Sequence[str], output: str) -> str:
    """Why a plan that gives a secret to `copies` (`secret_copies`: flags and variables that
    do not say they hold one) cannot be written as `output`."""
    return (
        f"the plan gives a secret (an API key, a token, a URL's credentials, a key-shaped "
        f"value) to {', '.join(copies)}, which the {output} output would have to "
        "carry in the clear; remove it from the plan and give it to the unit from a secret "
        "or key file (a Kubernetes Secret, systemd LoadCredential=, a Podman secret)"
    )


def carried_secrets(
    plan: LaunchPlan,
    output: str,
    *,
    executors: Executors = BUILTIN,
    moved: frozenset[str] = frozenset(),
) -> list[str]:
    """What secret `plan` hands its executor that `output`, a file that writes its argv and
    env as they are (a llama-swap config, a router preset), would carry in the clear, as
    ``plan --emit`` refuses it: a copy of a secret in a value (`copies_problem`), the value
    of a secret flag or of a mistyped one (``--hf-token``, ``--api-kee``, ``--apikey=``) and
    of a secret-named variable (``HF_TOKEN``). `moved` are the flags (canonical) and
    variables the output keeps out of the file itself (a router's own key)."""
    p = executors.profile(plan.spec.kind)
    problems: list[str] = []
    copies = secret_copies(plan.args, plan.env, executors=executors)
    if copies:
        problems.append(copies_problem(copies, output))
    for i, _, inline in secret_values(plan.args, executors):
        flag = inline or plan.args[i - 1]
        known = p.flags.lookup(flag)
        if (known[0].key if known is not None else flag) not in moved:
            problems.append(secret_flag_problem(flag))
    for name, value in env_dict(plan.env).items():
        if value and is_secret_name(name) and name not in moved:
            problems.append(secret_env_problem(name))
    return list(dict.fromkeys(problems))


def _plan_problems(p: ExecutorProfile, plan: LaunchPlan) -> list[str]:
    out = []
    if not 1 <= plan.port <= 65535:
        out.append(f"the plan's port {plan.port} is not a TCP port (1-65535)")
    problem = ready_problem(p, plan)
    if problem:
        out.append(problem)
    return out


def _standing(key: str) -> re.Pattern[str]:
    # A key of `SHORT_KEY` characters or more anywhere, inside a longer value too (``m-K``,
    # ``Bearer K``, ``http://u:K@h/``); a shorter one only as a word of its own, so a
    # one-letter key is not "found" in every name that holds the letter.
    if len(key) >= SHORT_KEY:
        return re.compile(re.escape(key))
    edge = r"A-Za-z0-9_.~+/=-"
    return re.compile(rf"(?<![{edge}]){re.escape(key)}(?![{edge}])")
