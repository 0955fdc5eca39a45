"""Kubernetes: the manifests read back, as the API server, the kubelet and the executor read
them (the checks of `exedra_engine._core.emit.formats.k8s`'s output, or of an edited copy)."""

from __future__ import annotations

from typing import Any

from exedra_engine._core.emit.formats.readback import argv_problems, get, is_port, port_of
from exedra_engine._core.emit.limits import bytes_of
from exedra_engine._core.emit.mounts import mount_problem
from exedra_engine._core.emit.names import DNS1035, DNS1123, QUALIFIED, SUBDOMAIN
from exedra_engine._core.emit.ready import expected_ready
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.launch_plan import LaunchPlan

_STANDARD = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
"""Resources every node has: not extended resources."""


def check_k8s(plan: LaunchPlan, text: str, p: ExecutorProfile) -> list[str]:
    import yaml  # here: only Kubernetes manifests are YAML

    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        return [f"not YAML: {e}"]
    out: list[str] = []
    pods = []
    services = []
    for d in docs:
        if not isinstance(d, dict):
            out.append("a document that is not a mapping")
            continue
        out += _meta_problems(d)
        kind = d.get("kind")
        if kind == "Secret":
            out.append(f"a Secret object ({get(d, 'metadata', 'name')}): keys stay out of files")
        elif kind in ("Deployment", "StatefulSet", "DaemonSet"):
            pods.append(get(d, "spec", "template", "spec") or {})
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
    name = str(get(d, "metadata", "name"))
    ns = get(d, "metadata", "namespace")
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
    for port in get(svc, "spec", "ports") or []:
        target = port.get("targetPort", port.get("port"))
        if port_of(target, named) != plan.port:
            out.append(f"Service port {port.get('name', '')} targets {target}, not the plan's")
        if not is_port(port.get("port")):
            out.append(f"Service port {port.get('port')!r} is not a TCP port")
    return out


def _pod_problems(
    p: ExecutorProfile, plan: LaunchPlan, pod: dict[str, Any], named: dict[str, int]
) -> list[str]:
    out: list[str] = []
    if pod.get("automountServiceAccountToken") is not False:
        out.append("automountServiceAccountToken is not false")
    sc = pod.get("securityContext") or {}
    if get(sc, "seccompProfile", "type") != "RuntimeDefault":
        out.append("the pod's seccompProfile is not RuntimeDefault")
    out += _uid_problems("the pod", sc)
    out += _volume_problems(pod.get("volumes") or [])
    secret_vols = {
        v.get("name") for v in pod.get("volumes") or [] if isinstance(v, dict) and "secret" in v
    }
    for c in pod.get("containers") or []:
        found = _container_problems(p, plan, c, (sc, named, secret_vols))
        out += [f"container {c.get('name', '?')}: {x}" for x in found]
    return out


def _container_problems(
    p: ExecutorProfile,
    plan: LaunchPlan,
    c: dict[str, Any],
    pod: tuple[dict[str, Any], dict[str, int], set[Any]],
) -> list[str]:
    sc, named, secret_vols = pod
    res = c.get("resources") or {}
    found = _security_problems(c, sc) + _port_problems(c, plan, named)
    found += _probe_problems(p, c, plan, named) + _resource_problems(res)
    found += _memory_problems(plan, res)
    found += _uid_problems("the container", c.get("securityContext") or {})
    return found + argv_problems(
        p, plan, [*(c.get("args") or [])], _env(p, c), _key_dirs(c, secret_vols)
    )


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
        path = get(v, "hostPath", "path")
        is_file = get(v, "hostPath", "type") == "File"
        if path is not None and (problem := mount_problem(str(path), is_file=is_file)):
            out.append(f"volume {v.get('name')} mounts {problem}")
        claim = get(v, "persistentVolumeClaim", "claimName")
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
    if "ALL" not in (get(csc, "capabilities", "drop") or []):
        out.append("capabilities do not drop ALL")
    return out


def _port_problems(c: dict[str, Any], plan: LaunchPlan, named: dict[str, int]) -> list[str]:
    out = []
    for port in c.get("ports") or []:
        if "hostPort" in port:
            out.append("a hostPort")
        if port.get("name"):
            named[port["name"]] = port.get("containerPort")
        if not is_port(port.get("containerPort")):
            out.append(f"containerPort {port.get('containerPort')!r} is not a TCP port")
    if plan.port not in {pt.get("containerPort") for pt in c.get("ports") or []}:
        out.append(f"no containerPort {plan.port}")
    return out


def _probe_problems(
    p: ExecutorProfile, c: dict[str, Any], plan: LaunchPlan, named: dict[str, int]
) -> list[str]:
    out = [f"no {kind}" for kind in ("startupProbe", "readinessProbe") if kind not in c]
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = c.get(kind)
        if probe is None:
            continue
        path = get(probe, "httpGet", "path")
        if path != plan.ready:
            out.append(f"{kind} asks {path}, not the ready path {plan.ready}")
        elif path != expected_ready(p, plan):
            out.append(f"{kind} asks {path!r}, not the profile's ready path")
        if port_of(get(probe, "httpGet", "port"), named) != plan.port:
            out.append(f"{kind} asks another port than {plan.port}")
    return out


def _resource_problems(res: dict[str, Any]) -> list[str]:
    out = []
    limits = res.get("limits") or {}
    requests = res.get("requests") or {}
    for name in {*limits, *requests}:
        if name in _STANDARD or str(name).startswith("hugepages-"):
            continue
        if not QUALIFIED.fullmatch(str(name)):
            out.append(f"resource {name!r} is not a qualified name")
            continue
        if name in requests and requests[name] != limits.get(name):
            out.append(f"{name} requests differ from its limits")
        count = limits.get(name, 0)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            out.append(f"{name} is not a non-negative whole number")
    return out


def _memory_problems(plan: LaunchPlan, res: dict[str, Any]) -> list[str]:
    limit = get(res, "limits", "memory")
    if plan.memory is None or limit is None:
        return []
    got = bytes_of(limit, k8s=True)
    if got is None:
        return [f"limits.memory {limit!r} is not a memory quantity"]
    if got < plan.memory.host.total:
        return [
            f"limits.memory {limit} is below the plan's expected resident peak "
            f"{plan.memory.host.total} bytes: the pod would be OOM-killed"
        ]
    return []
