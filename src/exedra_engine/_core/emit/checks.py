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
from exedra_engine._core.emit.names import DNS1035, DNS1123, QUALIFIED, SUBDOMAIN
from exedra_engine._core.emit.shape import (
    SYSTEM_TOP,
    Target,
    expected_ready,
    key_vars,
    plan_is_keyed,
    ready_problem,
)
from exedra_engine._core.endpoint import env_dict, resolve
from exedra_engine._core.executors import ExecutorProfile, executor_profile
from exedra_engine._core.redact import REDACTED, is_secret_name
from exedra_engine._core.values import LaunchPlan
from exedra_engine.errors import EngineError

_STANDARD = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
_QUALIFIED = QUALIFIED


def check_files(
    plan: LaunchPlan, target: Target, files: Mapping[str, str], secrets: Sequence[str] = ()
) -> list[str]:
    """What is wrong with `files` as a deployment of `plan` on `target` ([] if nothing).
    `secrets` are key texts that must appear nowhere (the plan's own key, when known)."""
    problems: list[str] = _plan_problems(plan)
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


def _plan_problems(plan: LaunchPlan) -> list[str]:
    out = []
    if not 1 <= plan.port <= 65535:
        out.append(f"the plan's port {plan.port} is not a TCP port (1-65535)")
    problem = ready_problem(executor_profile(plan.spec.kind), plan)
    if problem:
        out.append(problem)
    return out


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
        out += _meta_problems(d)
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
        out += _service_problems(plan, svc, container_ports)
    return out


def _meta_problems(d: dict[str, Any]) -> list[str]:
    kind = str(d.get("kind", "?"))
    name = str(_get(d, "metadata", "name"))
    ns = _get(d, "metadata", "namespace")
    out = []
    # Services are RFC 1035 labels; the rest of what is emitted RFC 1123 subdomains.
    rule, max_len = (DNS1035, 63) if kind == "Service" else (SUBDOMAIN, 253)
    if len(name) > max_len or not rule.fullmatch(name):
        out.append(f"{kind} name {name!r} is not a valid {kind} name")
    if ns is not None and (len(str(ns)) > 63 or not DNS1123.fullmatch(str(ns))):
        out.append(f"namespace {ns!r} is not a DNS label")
    return out


def _service_problems(plan: LaunchPlan, svc: dict[str, Any], named: dict[str, int]) -> list[str]:
    out = []
    for port in _get(svc, "spec", "ports") or []:
        target = port.get("targetPort", port.get("port"))
        if _port_of(target, named) != plan.port:
            out.append(f"Service port {port.get('name', '')} targets {target}, not the plan's")
        if not _is_port(port.get("port")):
            out.append(f"Service port {port.get('port')!r} is not a TCP port")
    return out


def _is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535


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
    out += _uid_problems("the pod", sc)
    out += _volume_problems(pod.get("volumes") or [])
    secret_vols = {
        v.get("name") for v in pod.get("volumes") or [] if isinstance(v, dict) and "secret" in v
    }
    for c in pod.get("containers") or []:
        name = c.get("name", "?")
        found = _security_problems(c, sc) + _port_problems(c, plan, named)
        found += _probe_problems(c, plan, named) + _resource_problems(c.get("resources") or {})
        found += _uid_problems("the container", c.get("securityContext") or {})
        found += _argv_problems(
            p, plan, [*(c.get("args") or [])], _env(p, c), _key_dirs(c, secret_vols)
        )
        out += [f"container {name}: {x}" for x in found]
    return out


def _env(p: ExecutorProfile, c: dict[str, Any]) -> list[str]:
    env = [
        f"{e.get('name')}={e.get('value', '')}"
        for e in c.get("env") or []
        if isinstance(e, dict) and "valueFrom" not in e
    ]
    return [*p.image_env, *env]


def _key_dirs(c: dict[str, Any], secret_vols: set[Any]) -> list[str]:
    return [
        m.get("mountPath", "")
        for m in c.get("volumeMounts") or []
        if m.get("name") in secret_vols and m.get("readOnly")
    ]


def _uid_problems(who: str, sc: dict[str, Any]) -> list[str]:
    out = []
    for key in ("runAsUser", "runAsGroup", "fsGroup"):
        v = sc.get(key)
        if v is not None and (not isinstance(v, int) or v < 0):
            out.append(f"{who}'s {key} {v!r} is not a user or group id")
    if sc.get("runAsNonRoot") and sc.get("runAsUser") == 0:
        out.append(f"{who} runs as uid 0 with runAsNonRoot: the kubelet refuses it")
    for g in sc.get("supplementalGroups") or []:
        if not isinstance(g, int) or g < 0:
            out.append(f"{who}'s supplemental group {g!r} is not a group id")
    return out


def _volume_problems(volumes: list[Any]) -> list[str]:
    out = []
    for v in volumes:
        if not isinstance(v, dict):
            continue
        path = _get(v, "hostPath", "path")
        if path is not None and str(path).rstrip("/") in {*SYSTEM_TOP, ""}:
            out.append(f"volume {v.get('name')} mounts the node's {path}: a whole system tree")
        claim = _get(v, "persistentVolumeClaim", "claimName")
        if claim is not None and (len(str(claim)) > 253 or not SUBDOMAIN.fullmatch(str(claim))):
            out.append(f"volume {v.get('name')}: claim {claim!r} is not a DNS subdomain")
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
        if not _is_port(port.get("containerPort")):
            out.append(f"containerPort {port.get('containerPort')!r} is not a TCP port")
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
        elif path != expected_ready(executor_profile(plan.spec.kind), plan.args, plan.env):
            out.append(f"{kind} asks {path!r}, not the profile's ready path")
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
        count = limits.get(name, 0)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            out.append(f"{name} is not a non-negative whole number")
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
        env = [
            ini.expand_dollars(w)
            for e in ini.setting(s, "Container", "Environment")
            for w in _env_words(e)
        ]
    except ValueError as e:
        return [f"Exec= or Environment= does not parse: {e}"]
    out += _quadlet_values(s)
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
    published = [
        ini.expand_dollars(v).rsplit(":", 1)[-1] for v in ini.setting(s, "Container", "PublishPort")
    ]
    if str(plan.port) not in published:
        out.append(f"no PublishPort= publishes the container's port {plan.port}")
    if not ini.setting(s, "Service", "TimeoutStartSec"):
        out.append("no TimeoutStartSec=: systemd's 90 s default would kill a long load")
    return out


def _quadlet_values(s: Mapping[str, list[tuple[str, str]]]) -> list[str]:
    # Quadlet copies [Container] values into ExecStart=: a lone $ would be expanded there.
    out = []
    for key, value in s.get("Container", []):
        try:
            ini.expand_dollars(value)
        except ValueError:
            out.append(f"{key}= holds a $ that systemd would expand in ExecStart=")
            continue
        if key == "Volume":
            source = ini.expand_dollars(value).split(":", 1)[0]
            if source.rstrip("/") in {*SYSTEM_TOP, ""}:
                out.append(f"Volume= mounts the host's {source}: a whole system tree")
        if key == "PublishPort":
            out += _publish_problems(ini.expand_dollars(value))
    return out


def _publish_problems(value: str) -> list[str]:
    import ipaddress

    parts = value.split(":")
    address = ":".join(parts[:-2]).strip("[]")
    out = []
    for port in parts[-2:]:
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            out.append(f"PublishPort={value}: {port!r} is not a TCP port")
    if address:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            out.append(f"PublishPort={value}: {address!r} is not an IP address")
    return out
