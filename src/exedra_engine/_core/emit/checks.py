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

Pure: the caller reads the files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from exedra_engine._core.emit import ini
from exedra_engine._core.emit.shape import key_vars, plan_is_keyed
from exedra_engine._core.endpoint import env_dict, resolve
from exedra_engine._core.executors import ExecutorProfile, executor_profile
from exedra_engine._core.redact import REDACTED, is_secret_name
from exedra_engine._core.targets import Target
from exedra_engine._core.values import LaunchPlan
from exedra_engine.errors import EngineError

_STANDARD = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
_QUALIFIED = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


def check_files(
    plan: LaunchPlan, target: Target, files: Mapping[str, str], secrets: Sequence[str] = ()
) -> list[str]:
    """What is wrong with `files` as a deployment of `plan` on `target` ([] if nothing).
    `secrets` are key texts that must appear nowhere (the plan's own key, when known)."""
    problems: list[str] = []
    known = [_standing(k) for k in (*secrets, plan.api_key) if k and k != REDACTED]
    for name, text in sorted(files.items()):
        if REDACTED in text:
            problems.append(f"{name}: carries the redaction marker {REDACTED}: a key stood there")
        if any(k.search(text) for k in known):
            problems.append(f"{name}: carries the API key in plain text")
    check = {Target.K8S: _k8s, Target.SYSTEMD: _systemd, Target.QUADLET: _quadlet}[target]
    for name, text in sorted(files.items()):
        problems += [f"{name}: {p}" for p in check(plan, text)]
    return problems


def _standing(key: str) -> re.Pattern[str]:
    # The key as a word of its own (a value, an argument), not inside another word: a
    # one-letter key is not "found" in every name that holds the letter.
    edge = r"A-Za-z0-9_.~+/=-"
    return re.compile(rf"(?<![{edge}]){re.escape(key)}(?![{edge}])")


# -- shared ----------------------------------------------------------------------------------


def _argv_problems(
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
    out += _env_problems(p, envmap)
    if plan_is_keyed(plan) and not key_files:
        out.append(f"the plan is keyed but the args give no {p.key_file_flag}: no key is required")
    out += [
        f"{p.key_file_flag} {f} is not in a mounted secret"
        for f in key_files
        if not any(f.startswith(d.rstrip("/") + "/") for d in key_dirs)
    ]
    return out + _endpoint_problems(p, plan, args, envmap)


def _env_problems(p: ExecutorProfile, envmap: Mapping[str, str]) -> list[str]:
    out = []
    for name, value in envmap.items():
        if name in key_vars(p) and value:
            out.append(f"env sets {name}: the key must come from the mounted file only")
        elif is_secret_name(name) and value:
            out.append(f"env sets {name}, a secret-named variable, in plain text")
    return out


def _endpoint_problems(
    p: ExecutorProfile, plan: LaunchPlan, args: Sequence[str], envmap: Mapping[str, str]
) -> list[str]:
    try:
        r = resolve(p.kind, args, envmap)
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


def _url_problems(what: str, url: str, plan: LaunchPlan) -> list[str]:
    m = re.fullmatch(r"https?://(\[[^\]]*\]|[^/:]*):(\d+)(/.*)?", url)
    if m is None:
        return [f"{what} {url!r} is not an http URL with a port"]
    out = []
    if int(m.group(2)) != plan.port:
        out.append(f"{what} asks port {m.group(2)}, not the plan's {plan.port}")
    if (m.group(3) or "/") != plan.ready:
        out.append(f"{what} asks {m.group(3) or '/'}, not the plan's ready path {plan.ready}")
    return out


# -- Kubernetes ------------------------------------------------------------------------------


def _k8s(plan: LaunchPlan, text: str) -> list[str]:
    import yaml  # here: only Kubernetes manifests are YAML

    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        return [f"not YAML: {e}"]
    out: list[str] = []
    p = executor_profile(plan.spec.kind)
    pods = []
    services = []
    for d in docs:
        if not isinstance(d, dict):
            out.append("a document that is not a mapping")
            continue
        kind = d.get("kind")
        if kind == "Secret":
            out.append(f"a Secret object ({_get(d, 'metadata', 'name')}): keys stay out of files")
        elif kind in ("Deployment", "StatefulSet", "DaemonSet"):
            pods.append(_get(d, "spec", "template", "spec") or {})
        elif kind == "Pod":
            pods.append(d.get("spec") or {})
        elif kind == "Service":
            services.append(d)
    if not pods:
        out.append("no Deployment or Pod")
    container_ports: dict[str, int] = {}
    for pod in pods:
        out += _pod_problems(p, plan, pod, container_ports)
    for svc in services:
        for port in _get(svc, "spec", "ports") or []:
            target = port.get("targetPort", port.get("port"))
            if _port_of(target, container_ports) != plan.port:
                out.append(f"Service port {port.get('name', '')} targets {target}, not the plan's")
    return out


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, dict):
            return None
        d = d.get(key)
    return d


def _port_of(value: Any, named: Mapping[str, int]) -> int | None:
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return named.get(value)
    return None


def _pod_problems(
    p: ExecutorProfile, plan: LaunchPlan, pod: dict[str, Any], named: dict[str, int]
) -> list[str]:
    out: list[str] = []
    if pod.get("automountServiceAccountToken") is not False:
        out.append("automountServiceAccountToken is not false")
    sc = pod.get("securityContext") or {}
    if _get(sc, "seccompProfile", "type") != "RuntimeDefault":
        out.append("the pod's seccompProfile is not RuntimeDefault")
    secret_vols = {
        v.get("name") for v in pod.get("volumes") or [] if isinstance(v, dict) and "secret" in v
    }
    for c in pod.get("containers") or []:
        name = c.get("name", "?")
        found = _security_problems(c, sc) + _port_problems(c, plan, named)
        found += _probe_problems(c, plan, named) + _resource_problems(c.get("resources") or {})
        env = [
            f"{e.get('name')}={e.get('value', '')}"
            for e in c.get("env") or []
            if isinstance(e, dict) and "valueFrom" not in e
        ]
        key_dirs = [
            m.get("mountPath", "")
            for m in c.get("volumeMounts") or []
            if m.get("name") in secret_vols and m.get("readOnly")
        ]
        found += _argv_problems(p, plan, [*(c.get("args") or [])], [*p.image_env, *env], key_dirs)
        out += [f"container {name}: {x}" for x in found]
    return out


def _security_problems(c: dict[str, Any], pod_sc: dict[str, Any]) -> list[str]:
    out = []
    csc = c.get("securityContext") or {}
    if not (csc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
        out.append("runAsNonRoot is not set")
    if csc.get("allowPrivilegeEscalation") is not False:
        out.append("allowPrivilegeEscalation is not false")
    if "ALL" not in (_get(csc, "capabilities", "drop") or []):
        out.append("capabilities do not drop ALL")
    return out


def _port_problems(c: dict[str, Any], plan: LaunchPlan, named: dict[str, int]) -> list[str]:
    out = []
    for port in c.get("ports") or []:
        if "hostPort" in port:
            out.append("a hostPort")
        if port.get("name"):
            named[port["name"]] = port.get("containerPort")
    if plan.port not in {pt.get("containerPort") for pt in c.get("ports") or []}:
        out.append(f"no containerPort {plan.port}")
    return out


def _probe_problems(c: dict[str, Any], plan: LaunchPlan, named: dict[str, int]) -> list[str]:
    out = [f"no {kind}" for kind in ("startupProbe", "readinessProbe") if kind not in c]
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = c.get(kind)
        if probe is None:
            continue
        path = _get(probe, "httpGet", "path")
        if path != plan.ready:
            out.append(f"{kind} asks {path}, not the ready path {plan.ready}")
        if _port_of(_get(probe, "httpGet", "port"), named) != plan.port:
            out.append(f"{kind} asks another port than {plan.port}")
    return out


def _resource_problems(res: dict[str, Any]) -> list[str]:
    out = []
    limits = res.get("limits") or {}
    requests = res.get("requests") or {}
    for name in {*limits, *requests}:
        if name in _STANDARD or str(name).startswith("hugepages-"):
            continue
        if not _QUALIFIED.fullmatch(str(name)):
            out.append(f"resource {name!r} is not a qualified name")
            continue
        if name in requests and requests[name] != limits.get(name):
            out.append(f"{name} requests differ from its limits")
        if not isinstance(limits.get(name, 0), int):
            out.append(f"{name} is not a whole number")
    return out


# -- systemd and Quadlet ---------------------------------------------------------------------


def _words(value: str, specifiers: Mapping[str, str]) -> list[str]:
    return ini.exec_argv(value, specifiers)


def _env_words(value: str) -> list[str]:
    return ini.split_words(ini.resolve_specifiers(value, {}))


def _systemd(plan: LaunchPlan, text: str) -> list[str]:
    p = executor_profile(plan.spec.kind)
    s = ini.read_ini(text)
    out: list[str] = []
    cred = "/run/credentials/UNIT"
    starts = ini.setting(s, "Service", "ExecStart")
    if len(starts) != 1:
        return [f"{len(starts)} ExecStart= lines, not one"]
    try:
        argv = _words(starts[0], {"d": cred, "n": "UNIT"})
        env = [w for e in ini.setting(s, "Service", "Environment") for w in _env_words(e)]
    except ValueError as e:
        return [f"ExecStart= or Environment= does not parse: {e}"]
    if argv[:1] != [plan.command]:
        out.append(f"ExecStart= runs {argv[:1]}, not the plan's {plan.command}")
    keyed = plan_is_keyed(plan)
    creds = ini.setting(s, "Service", "LoadCredential")
    if keyed and not creds:
        out.append("the plan is keyed but no LoadCredential= brings the key")
    out += _argv_problems(p, plan, argv[1:], env, [cred] if creds else [])
    if ini.setting(s, "Service", "EnvironmentFile"):
        out.append("EnvironmentFile= is readable through D-Bus and /proc: no secrets there")
    posts = ini.setting(s, "Service", "ExecStartPost")
    if not posts:
        out.append("no ExecStartPost= waits for the ready path")
    for post in posts:
        try:
            words = _words(post, {})
        except ValueError as e:
            out.append(f"ExecStartPost= does not parse: {e}")
            continue
        out += _url_problems("ExecStartPost=", words[-1] if words else "", plan)
    for key, want in (("KillMode", "mixed"), ("KillSignal", "SIGTERM"), ("SendSIGHUP", "no")):
        if ini.setting(s, "Service", key)[-1:] != [want]:
            out.append(f"{key}= is not {want}")
    for key in ("TimeoutStartSec", "TimeoutStopSec"):
        if not ini.setting(s, "Service", key):
            out.append(f"no {key}=")
    return out


def _quadlet(plan: LaunchPlan, text: str) -> list[str]:
    p = executor_profile(plan.spec.kind)
    s = ini.read_ini(text)
    out: list[str] = []
    try:
        argv = [w for e in ini.setting(s, "Container", "Exec") for w in _words(e, {})]
        env = [w for e in ini.setting(s, "Container", "Environment") for w in _env_words(e)]
    except ValueError as e:
        return [f"Exec= or Environment= does not parse: {e}"]
    secrets = [v.split(",") for v in ini.setting(s, "Container", "Secret")]
    key_dirs = []
    for parts in secrets:
        opts = dict(x.partition("=")[::2] for x in parts[1:])
        if opts.get("type") != "mount":
            out.append(f"Secret={parts[0]} is not type=mount")
        target = opts.get("target", f"/run/secrets/{parts[0]}")
        key_dirs.append(target.rsplit("/", 1)[0])
    out += _argv_problems(p, plan, argv, [*p.image_env, *env], key_dirs)
    health = ini.setting(s, "Container", "HealthCmd")
    if not health:
        out.append("no HealthCmd= asks the ready path")
    for h in health:
        words = re.findall(r"https?://\S+?(?=[\"'\s]|$)", h)
        if not words:
            out.append(f"HealthCmd= {h!r} asks no URL")
        for url in words:
            out += _url_problems("HealthCmd=", url, plan)
    if ini.setting(s, "Container", "Notify")[-1:] != ["healthy"]:
        out.append("Notify= is not healthy: the unit would be started before the model loads")
    published = [v.rsplit(":", 1)[-1] for v in ini.setting(s, "Container", "PublishPort")]
    if str(plan.port) not in published:
        out.append(f"no PublishPort= publishes the container's port {plan.port}")
    if not ini.setting(s, "Service", "TimeoutStartSec"):
        out.append("no TimeoutStartSec=: systemd's 90 s default would kill a long load")
    return out
