"""Kubernetes: a Deployment and a ClusterIP Service, built as data and dumped as YAML.

What the peers get wrong, and what is done instead: probes on the plan's ready path (a startup
probe sized from the model, then readiness; no liveness by default); the key in a Secret
mounted read-only, given to the executor as a file; GPU limits by the probed driver's device
plugin resource; the restricted Pod Security profile; no hostPort; nothing that depends on the
machine that emits.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any

from exedra_engine._core.emit.formats.container import (
    VULKAN_CAPABILITIES,
    container_argv,
    container_env,
)
from exedra_engine._core.emit.keys import KEY_DIR, KEY_NAME
from exedra_engine._core.emit.limits import cpu_request
from exedra_engine._core.emit.mounts import MOUNT
from exedra_engine._core.emit.options import EmitOptions, Origin
from exedra_engine._core.emit.shape import Shape
from exedra_engine._core.targets import Storage
from exedra_engine.errors import EmitError

STARTUP_PERIOD = 2
"""Seconds between startup probes: a loaded model is seen within 2 s."""
READY_PERIOD = 10
READY_FAILURES = 3
PORT_NAME = "http"


def _why(field: str, value: object, why: str, source: str = "default") -> Origin:
    return Origin(field=field, value=str(value), source=source, why=why)


def emit_k8s(s: Shape, options: EmitOptions) -> tuple[dict[str, str], list[Origin]]:
    _refuse_needs(s)
    origins: list[Origin] = []
    labels = {"app.kubernetes.io/name": s.name, "app.kubernetes.io/managed-by": "exedra-engine"}
    selector = {"app.kubernetes.io/name": s.name}
    meta: dict[str, Any] = {"name": s.name, "labels": labels}
    if options.namespace:
        meta["namespace"] = options.namespace
    for kind in ("deployment", "service"):
        origins.append(
            _why(
                f"{kind}.metadata",
                s.name,
                "the name; labels name the app and say who manages it"
                + (f"; namespace {options.namespace} by option" if options.namespace else ""),
            )
        )
    pod = _pod(s, options, origins)
    spec: dict[str, Any] = {"replicas": 1, "selector": {"matchLabels": selector}}
    origins.append(
        _why(
            "deployment.spec.replicas",
            1,
            "one executor per plan: its port and GPUs are for one process",
        )
    )
    origins.append(
        _why("deployment.spec.selector", s.name, "the pods this Deployment owns, by the name label")
    )
    origins.append(
        _why(
            "deployment.spec.template.metadata",
            s.name,
            "the labels the selector and the Service match",
        )
    )
    if s.gpu is not None:
        spec["strategy"] = {"type": "Recreate"}
        origins.append(
            _why(
                "deployment.spec.strategy",
                "Recreate",
                "a rolling update would need a second set of GPUs while the old pod runs",
            )
        )
    spec["template"] = {"metadata": {"labels": labels}, "spec": pod}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": spec}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {"name": PORT_NAME, "port": s.plan.port, "targetPort": PORT_NAME, "protocol": "TCP"}
            ],
        },
    }
    origins.append(
        _why(
            "service.spec",
            f"ClusterIP {s.plan.port}",
            "reachable in the cluster only (no hostPort, no NodePort), on the plan's port",
        )
    )
    text = "\n".join(_header(s, options)) + "\n" + dump_yaml([deployment, service])
    return {f"{s.name}.yaml": text}, origins


def _refuse_needs(s: Shape) -> None:
    # The restricted Pod Security profile adds no capability but NET_BIND_SERVICE, and a pod
    # has no setting for a resource limit: these flags would fail inside the pod.
    for need, flag in s.needs:
        if need == "priority":
            raise EmitError(
                f"the plan passes {flag} above 0, which needs CAP_SYS_NICE: a restricted pod "
                "cannot have it; remove the flag for Kubernetes"
            )
        if need == "memlock":
            raise EmitError(
                f"the plan passes {flag}, which needs a memlock limit a pod cannot set "
                "(the runtime's default is often 64 KiB); remove the flag for Kubernetes"
            )


def _header(s: Shape, options: EmitOptions) -> list[str]:
    header = [
        f"# {s.name}: emitted by exedra-engine from a plan; edit the plan, not this file.",
    ]
    if s.keyed:
        header.append(
            f"# The key: kubectl create secret generic {s.secret} --from-file={KEY_NAME}=KEYFILE"
        )
    apart = len(s.mounts) > 1 or any(m.is_file for m in s.mounts)
    if options.storage is not Storage.HOST and apart:
        for m in s.mounts:
            # JSON strings: a path cannot end the comment line.
            inside = json.dumps(m.container[len(MOUNT) + 1 :], ensure_ascii=False)
            header.append(
                f"# The model volume holds {inside}: {json.dumps(m.host, ensure_ascii=False)}"
            )
    if s.gpu is not None and s.gpu.driver in GROUP_DRIVERS and not options.gpu_groups:
        header.append(
            f"# {s.gpu.driver} device nodes are root:render 0660: give --gpu-group with the "
            "node's render gid unless the runtime hands devices to the pod's user"
        )
    return header


GROUP_DRIVERS = frozenset({"amdgpu", "i915", "xe"})
"""Drivers whose device nodes only the render group opens (NVIDIA's are 0666)."""


def _pod(s: Shape, options: EmitOptions, origins: list[Origin]) -> dict[str, Any]:
    volumes, mounts = _volumes(s, options, origins)
    sc: dict[str, Any] = {
        "runAsNonRoot": True,
        "runAsUser": options.uid,
        "runAsGroup": options.uid,
        "fsGroup": options.uid,
    }
    uid_given = options.uid != EmitOptions().uid
    origins.append(
        _why(
            "pod.securityContext",
            f"uid=gid=fsGroup={options.uid}, non-root, seccomp RuntimeDefault",
            "the restricted Pod Security profile; "
            + ("uid by --uid" if uid_given else "65532 is the conventional non-root uid")
            + "; fsGroup lets that user read the mounted Secret",
            "option" if uid_given else "default",
        )
    )
    if options.gpu_groups:
        sc["supplementalGroups"] = list(options.gpu_groups)
        origins.append(
            _why(
                "pod.securityContext.supplementalGroups",
                " ".join(map(str, options.gpu_groups)),
                "--gpu-group: the node's render group opens the GPU device nodes",
                "option",
            )
        )
    sc["seccompProfile"] = {"type": "RuntimeDefault"}
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        # Service links put <SERVICE>_PORT=tcp://... in the env of every pod: a Service named
        # like an executor variable's prefix would set a port the executor cannot parse.
        "enableServiceLinks": False,
        "securityContext": sc,
        "terminationGracePeriodSeconds": s.stop_timeout,
        "containers": [_container(s, mounts, origins)],
        "volumes": volumes,
    }
    origins += [
        _why("pod.automountServiceAccountToken", False, "the server needs no Kubernetes API"),
        _why(
            "pod.enableServiceLinks",
            False,
            "Service links would add *_PORT variables the executor might misread",
        ),
        _why(
            "pod.terminationGracePeriodSeconds",
            s.stop_timeout,
            "the stop timeout: one SIGTERM, then this long",
        ),
    ]
    return pod


def _container(s: Shape, mounts: list[dict[str, Any]], origins: list[Origin]) -> dict[str, Any]:
    args, env = container_argv(s)
    container: dict[str, Any] = {
        "name": "server",
        "image": s.image,
        "command": [s.image_command],
        "args": args,
    }
    origins += [
        _why("container.name", "server", "one container"),
        _why("container.image", s.image, "see image"),
        _why("container.command", s.image_command, "see command"),
        _why(
            "container.args",
            f"{len(args)} words",
            "the plan's argv: model files at their mount, the key as a file, no key text",
            "plan",
        ),
    ]
    if env:
        container["env"] = [{"name": n, "value": v} for n, v in env]
        origins.append(
            _why(
                "container.env",
                " ".join(n for n, _ in env),
                "the plan's env without keys"
                + (
                    f"; NVIDIA_DRIVER_CAPABILITIES={VULKAN_CAPABILITIES} for the Vulkan image"
                    if container_env(s)
                    else ""
                ),
                "plan",
            )
        )
    container["ports"] = [{"name": PORT_NAME, "containerPort": s.plan.port, "protocol": "TCP"}]
    origins.append(
        _why("container.ports", s.plan.port, "the plan's port, named for the probes", "plan")
    )
    _probes(s, container, origins)
    resources = _resources(s, origins)
    if resources:
        container["resources"] = resources
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }
    origins.append(
        _why(
            "container.securityContext",
            "no escalation, drop ALL, read-only root, non-root",
            "the restricted Pod Security profile; /tmp is an emptyDir",
        )
    )
    container["volumeMounts"] = mounts
    origins.append(
        _why(
            "container.volumeMounts",
            " ".join(m["mountPath"] for m in mounts),
            "the models read-only, a writable /tmp"
            + (", the key's Secret read-only" if s.keyed else ""),
        )
    )
    return container


def _resources(s: Shape, origins: list[Origin]) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    if s.gpu is not None:
        if not s.gpu.resource:
            raise EmitError(
                f"no Kubernetes resource is known for the {s.gpu.driver} driver: give "
                "--gpu-resource"
            )
        limits[s.gpu.resource] = s.gpu.count
        origins.append(
            _why(
                f"container.resources.limits.{s.gpu.resource}",
                str(s.gpu.count),
                "GPUs in limits only (a request equals its limit): see gpu",
            )
        )
    if s.memory is not None:
        requests["memory"] = f"{s.memory.peak}Mi"
        limits["memory"] = f"{s.memory.limit}Mi"
        origins += [
            _why(
                "container.resources.requests.memory",
                f"{s.memory.peak}Mi",
                "the plan's expected resident peak (memory.host.total): the scheduler "
                "places the pod where it fits",
                "plan",
            ),
            _why(
                "container.resources.limits.memory",
                f"{s.memory.limit}Mi",
                f"the peak + a margin: {s.memory.why}",
                "plan",
            ),
        ]
    if s.threads:
        requests["cpu"] = cpu_request(s.threads)
        origins.append(
            _why(
                "container.resources.requests.cpu",
                cpu_request(s.threads),
                "the plan's threads, one core each; no CPU limit (a throttled decode is "
                "slower than a shared core)",
                "plan",
            )
        )
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def _probes(s: Shape, container: dict[str, Any], origins: list[Origin]) -> None:
    probe = {"httpGet": {"path": s.plan.ready, "port": PORT_NAME}}
    startup_failures = math.ceil(s.start_budget / STARTUP_PERIOD)
    container["startupProbe"] = {
        **probe,
        "periodSeconds": STARTUP_PERIOD,
        "timeoutSeconds": 2,
        "failureThreshold": startup_failures,
    }
    container["readinessProbe"] = {
        **probe,
        "periodSeconds": READY_PERIOD,
        "timeoutSeconds": 5,
        "failureThreshold": READY_FAILURES,
    }
    origins += [
        _why(
            "container.startupProbe",
            f"GET {s.plan.ready} every {STARTUP_PERIOD}s, timeout 2s, {startup_failures} tries",
            f"the ready path; start budget {s.start_budget} s / period {STARTUP_PERIOD} s "
            "(a loaded model is seen within 2 s)",
        ),
        _why(
            "container.readinessProbe",
            f"GET {s.plan.ready} every {READY_PERIOD}s, timeout 5s, {READY_FAILURES} tries",
            "the ready path once started; no liveness probe (a busy server answers slowly, "
            "and a restart reloads the model)",
        ),
        _why(
            "startupProbe.failureThreshold",
            startup_failures,
            f"start budget {s.start_budget} s / period {STARTUP_PERIOD} s",
        ),
    ]


def dump_yaml(docs: list[dict[str, Any]]) -> str:
    """Documents as YAML: block style, keys in the order built, every string that could be
    misread (``"8080"``, ``"on"``, ``"a: b"``) quoted by the dumper, not by hand."""
    import yaml  # here: a command line that emits no manifest never loads PyYAML

    return yaml.dump_all(
        docs,
        Dumper=_dumper(),
        explicit_start=True,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=100000,
    )


@functools.cache
def _dumper() -> Any:
    import yaml

    class Dumper(yaml.SafeDumper):
        # A value used twice (the labels, the probe) is written twice, not as an alias.
        def ignore_aliases(self, data: Any) -> bool:
            return True

    return Dumper


def _volumes(
    s: Shape, options: EmitOptions, origins: list[Origin]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes, mounts = _model_volumes(s, options, origins)
    volumes.append({"name": "tmp", "emptyDir": {}})
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    if s.keyed:
        mounts.append({"name": KEY_NAME, "mountPath": KEY_DIR, "readOnly": True})
        volumes.append(
            {
                "name": KEY_NAME,
                "secret": {
                    "secretName": s.secret,
                    "items": [{"key": KEY_NAME, "path": KEY_NAME}],
                    "defaultMode": 0o440,
                },
            }
        )
    origins.append(
        _why(
            "pod.volumes",
            " ".join(v["name"] for v in volumes),
            "the models (see models volume), an emptyDir for /tmp (the root is read-only)"
            + (
                ", the key's Secret as a file readable by the pod's group (0440)" if s.keyed else ""
            ),
        )
    )
    return volumes, mounts


def _model_volumes(
    s: Shape, options: EmitOptions, origins: list[Origin]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    if options.storage is Storage.HOST:
        volumes = []
        mounts = []
        for i, m in enumerate(s.mounts):
            name = "models" if i == 0 else f"models-{i}"
            kind = "File" if m.is_file else "Directory"
            volumes.append({"name": name, "hostPath": {"path": m.host, "type": kind}})
            mounts.append({"name": name, "mountPath": m.container, "readOnly": True})
        origins.append(
            Origin(
                field="models volume",
                value=" ".join(f"hostPath {m.host}" for m in s.mounts),
                source="option",
                why="--storage host: the node's own files, one read-only mount each",
            )
        )
        return volumes, mounts
    mounts = [{"name": "models", "mountPath": MOUNT, "readOnly": True}]
    if options.storage is Storage.IMAGE:
        if not options.models_image:
            raise EmitError("storage image needs --models-image, the image holding the models")
        origins.append(Origin(field="models volume", value=options.models_image, source="option"))
        volume = {
            "name": "models",
            "image": {"reference": options.models_image, "pullPolicy": "IfNotPresent"},
        }
        return [volume], mounts
    claim = options.claim or f"{s.name}-models"
    held = " and ".join(f"{m.host} as {m.container}" for m in s.mounts) or "nothing"
    origins.append(
        Origin(
            field="models volume",
            value=f"persistentVolumeClaim {claim}",
            source="option" if options.claim else "default",
            why=f"a claim holding {held}, mounted read-only at {MOUNT}",
        )
    )
    volume = {"name": "models", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
    return [volume], mounts
