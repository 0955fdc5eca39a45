"""Kubernetes: a Deployment and a ClusterIP Service, built as data and dumped as YAML.

What the peers get wrong, and what is done instead: probes on the plan's ready path (a startup
probe sized from the model, then readiness; no liveness by default); the key in a Secret
mounted read-only, given to the executor as a file; GPU limits by the probed driver's device
plugin resource; the restricted Pod Security profile; no hostPort; nothing that depends on the
machine that emits.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from exedra_engine._core.emit.shape import (
    KEY_DIR,
    KEY_NAME,
    MOUNT,
    EmitOptions,
    Origin,
    Shape,
    in_container,
    normal_path,
)
from exedra_engine._core.executors import executor_profile
from exedra_engine._core.targets import Storage
from exedra_engine.errors import EmitError

STARTUP_PERIOD = 2
"""Seconds between startup probes: a loaded model is seen within 2 s."""
READY_PERIOD = 10
READY_FAILURES = 3
PORT_NAME = "http"


def container_argv(s: Shape) -> tuple[list[str], list[tuple[str, str]]]:
    """The container's args and env: the shape's, model files at their mount, the key file."""
    p = executor_profile(s.profile_kind)
    files = set(s.model_files)
    args: list[str] = []
    for it in p.flags.split_items(s.args, "plan args"):
        if it.key in p.model_file_flags and it.values and normal_path(it.values[0]) in files:
            args.extend((it.tokens[0], in_container(it.values[0], s.models_dir), *it.values[1:]))
        else:
            args.extend(it.tokens)
    env = []
    for name, value in s.env:
        f = p.flags.flag_for_env(name)
        moved = f is not None and f.key in p.model_file_flags and value
        env.append((name, in_container(value, s.models_dir) if moved else value))
    if s.keyed:
        args += [p.key_file_flag, key_path(s)]
    return args, env


def key_path(s: Shape) -> str:
    return f"{KEY_DIR}/{KEY_NAME}"


def emit_k8s(s: Shape, options: EmitOptions) -> tuple[dict[str, str], list[Origin]]:
    origins: list[Origin] = []
    args, env = container_argv(s)
    labels = {"app.kubernetes.io/name": s.name, "app.kubernetes.io/managed-by": "exedra-engine"}
    selector = {"app.kubernetes.io/name": s.name}
    meta: dict[str, Any] = {"name": s.name, "labels": labels}
    if options.namespace:
        meta["namespace"] = options.namespace

    probe = {"httpGet": {"path": s.plan.ready, "port": PORT_NAME}}
    startup_failures = math.ceil(s.start_budget / STARTUP_PERIOD)
    origins.append(
        Origin(
            field="startupProbe.failureThreshold",
            value=str(startup_failures),
            source="default",
            why=f"start budget {s.start_budget} s / period {STARTUP_PERIOD} s",
        )
    )
    mounts: list[dict[str, Any]] = [
        {"name": "models", "mountPath": MOUNT, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    volumes: list[dict[str, Any]] = [
        _models_volume(s, options, origins),
        {"name": "tmp", "emptyDir": {}},
    ]
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
    container: dict[str, Any] = {
        "name": "server",
        "image": s.image,
        "command": [s.image_command],
        "args": args,
    }
    if env:
        container["env"] = [{"name": n, "value": v} for n, v in env]
    container["ports"] = [{"name": PORT_NAME, "containerPort": s.plan.port, "protocol": "TCP"}]
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
    if s.gpu is not None:
        if not s.gpu.resource:
            raise EmitError(
                f"no Kubernetes resource is known for the {s.gpu.driver} driver: give "
                "--gpu-resource"
            )
        container["resources"] = {"limits": {s.gpu.resource: s.gpu.count}}
    container["securityContext"] = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }
    container["volumeMounts"] = mounts
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        # Service links put <SERVICE>_PORT=tcp://... in the env of every pod: a Service named
        # like an executor variable's prefix would set a port the executor cannot parse.
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": options.uid,
            "runAsGroup": options.uid,
            "fsGroup": options.uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "terminationGracePeriodSeconds": s.stop_timeout,
        "containers": [container],
        "volumes": volumes,
    }
    spec: dict[str, Any] = {"replicas": 1, "selector": {"matchLabels": selector}}
    if s.gpu is not None:
        spec["strategy"] = {"type": "Recreate"}
        origins.append(
            Origin(
                field="strategy",
                value="Recreate",
                source="default",
                why="a rolling update would need a second set of GPUs while the old pod runs",
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
    header = [
        f"# {s.name}: emitted by exedra-engine from a plan; edit the plan, not this file.",
    ]
    if s.keyed:
        header.append(
            f"# The key: kubectl create secret generic {s.secret} --from-file={KEY_NAME}=KEYFILE"
        )
    text = "\n".join(header) + "\n" + dump_yaml([deployment, service])
    return {f"{s.name}.yaml": text}, origins


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


def _models_volume(s: Shape, options: EmitOptions, origins: list[Origin]) -> dict[str, Any]:
    if options.storage is Storage.IMAGE:
        if not options.models_image:
            raise EmitError("storage image needs --models-image, the image holding the models")
        origins.append(Origin(field="models volume", value=options.models_image, source="option"))
        return {
            "name": "models",
            "image": {"reference": options.models_image, "pullPolicy": "IfNotPresent"},
        }
    if options.storage is Storage.HOST:
        origins.append(
            Origin(field="models volume", value=f"hostPath {s.models_dir}", source="option")
        )
        return {"name": "models", "hostPath": {"path": s.models_dir, "type": "Directory"}}
    claim = options.claim or f"{s.name}-models"
    origins.append(
        Origin(
            field="models volume",
            value=f"persistentVolumeClaim {claim}",
            source="option" if options.claim else "default",
            why=f"a claim holding {s.models_dir}'s files, mounted read-only",
        )
    )
    return {"name": "models", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
