"""Podman Quadlet: one ``.container`` unit, as INI data (`exedra_engine._core.emit.ini`).

The key is a Podman secret mounted as a file (``Secret=NAME,type=mount``); the unit is started
once the container's health check on the ready path passes (``Notify=healthy``), within an
explicit ``TimeoutStartSec`` (podman #27290: a start period beyond systemd's default 90 s gets
the unit killed otherwise).
"""

from __future__ import annotations

import json

from exedra_engine._core.emit.ini import (
    Section,
    Unwritable,
    env_assignment,
    exec_word,
    plain,
    write_ini,
)
from exedra_engine._core.emit.k8s import container_argv, key_path
from exedra_engine._core.emit.shape import MOUNT, EmitOptions, Origin, Shape
from exedra_engine._core.emit.systemd import RESTART_DELAY
from exedra_engine._core.executors import executor_profile
from exedra_engine._core.values import base_url
from exedra_engine.errors import EmitError

HEALTH_INTERVAL = 5
HEALTH_RETRIES = 3

# What Podman passes through for each driver: NVIDIA's CDI spec, the DRM and KFD nodes.
DEVICES = {
    "nvidia": ("nvidia.com/gpu=all",),
    "amdgpu": ("/dev/dri", "/dev/kfd"),
    "i915": ("/dev/dri",),
    "xe": ("/dev/dri",),
}


def emit_quadlet(s: Shape, options: EmitOptions) -> tuple[dict[str, str], list[Origin]]:
    p = executor_profile(s.profile_kind)
    origins: list[Origin] = []
    args, env = container_argv(s)
    url = base_url(s.plan.host, s.plan.port) + s.plan.ready
    if not p.image_http_get:
        raise EmitError(f"no health command is known for the {p.binary} images")
    health = json.dumps([*p.image_http_get, url], ensure_ascii=True)
    if ":" in s.models_dir or "," in s.models_dir:
        raise EmitError(
            f"the models directory {s.models_dir!r} holds ':' or ',', which Volume= reads as "
            "its separators: give --models-dir without them"
        )
    try:
        container: list[tuple[str, str]] = [
            ("ContainerName", plain(s.name)),
            ("Image", plain(s.image)),
            ("Entrypoint", plain(s.image_command)),
            ("Exec", " ".join(exec_word(a) for a in args)),
        ]
        container += [("Environment", env_assignment(n, v)) for n, v in env]
        container.append(("Volume", plain(f"{s.models_dir}:{MOUNT}:ro")))
        if s.keyed:
            container.append(
                ("Secret", plain(f"{s.secret},type=mount,target={key_path(s)},mode=0400"))
            )
        publish = f"{options.publish_address}:" if options.publish_address else ""
        if ":" in options.publish_address:
            publish = f"[{options.publish_address}]:"
        container.append(("PublishPort", plain(f"{publish}{s.plan.port}:{s.plan.port}")))
        container += [
            ("HealthCmd", plain(health)),
            ("HealthInterval", f"{HEALTH_INTERVAL}s"),
            ("HealthRetries", str(HEALTH_RETRIES)),
            ("HealthStartPeriod", f"{s.start_budget}s"),
            ("Notify", "healthy"),
            ("ReadOnly", "true"),
            ("NoNewPrivileges", "true"),
            ("DropCapability", "all"),
            ("StopTimeout", str(s.stop_timeout)),
        ]
    except Unwritable as e:
        raise EmitError(f"Quadlet cannot be given this plan: {e}") from None
    origins.append(
        Origin(
            field="PublishPort",
            value=f"{publish}{s.plan.port}:{s.plan.port}",
            source="option" if options.publish_address != "127.0.0.1" else "default",
            why="the plan's port; published on loopback unless --publish-address says otherwise",
        )
    )
    origins.append(
        Origin(
            field="HealthCmd",
            value=health,
            source="default",
            why="the plan's ready path, asked inside the container with the image's curl",
        )
    )
    if s.gpu is not None:
        for d in DEVICES.get(s.gpu.driver, ("/dev/dri",)):
            container.append(("AddDevice", d))
        if s.gpu.driver != "nvidia":
            container.append(("GroupAdd", "keep-groups"))
        origins.append(
            Origin(
                field="AddDevice",
                value=" ".join(DEVICES.get(s.gpu.driver, ("/dev/dri",))),
                source="probe",
                why=f"the {s.gpu.driver} driver's devices"
                + ("" if s.gpu.driver == "nvidia" else ", with the caller's groups (render)"),
            )
        )
    service = [
        ("TimeoutStartSec", f"{s.start_budget + HEALTH_INTERVAL * HEALTH_RETRIES}s"),
        ("TimeoutStopSec", f"{s.stop_timeout + 5}s"),
        ("Restart", "on-failure"),
        ("RestartSec", f"{RESTART_DELAY}s"),
    ]
    origins.append(
        Origin(
            field="TimeoutStartSec",
            value=service[0][1],
            source="default",
            why=f"the start budget + {HEALTH_RETRIES} health checks {HEALTH_INTERVAL} s apart",
        )
    )
    try:
        description = plain(f"exedra-engine: {p.binary} {s.name} (container)")
    except Unwritable as e:
        raise EmitError(f"Quadlet cannot be given this plan: {e}") from None
    sections: list[Section] = [
        (
            "Unit",
            [
                ("Description", description),
                ("After", "network-online.target"),
                ("Wants", "network-online.target"),
            ],
        ),
        ("Container", container),
        ("Service", service),
        ("Install", [("WantedBy", "default.target")]),
    ]
    header = [f"{s.name}: emitted by exedra-engine from a plan; edit the plan, not this file."]
    if s.keyed:
        header.append(f"The key: podman secret create {s.secret} KEYFILE")
    return {f"{s.name}.container": write_ini(sections, header)}, origins
