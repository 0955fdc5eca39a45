"""Podman Quadlet: one ``.container`` unit, as INI data (`exedra_engine._core.emit.formats.ini`).

The key is a Podman secret mounted as a file (``Secret=NAME,type=mount``); the unit is started
once the container's health check on the ready path passes (``Notify=healthy``), within an
explicit ``TimeoutStartSec`` (podman #27290: a start period beyond systemd's default 90 s gets
the unit killed otherwise).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from exedra_engine._core.emit.formats import ini
from exedra_engine._core.emit.formats.container import container_argv, key_path
from exedra_engine._core.emit.formats.ini import (
    Section,
    Unwritable,
    env_assignment,
    exec_word,
    plain,
    write_ini,
)
from exedra_engine._core.emit.formats.readback import argv_problems, env_words, url_problems, words
from exedra_engine._core.emit.formats.systemd import RESTART_DELAY, memory_problems
from exedra_engine._core.emit.mounts import mount_problem
from exedra_engine._core.emit.options import EmitOptions, Origin
from exedra_engine._core.emit.shape import Shape
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.struct import freeze
from exedra_engine._core.targets import Selinux
from exedra_engine._core.values import base_url
from exedra_engine.errors import EmitError

_UNQUOTED = frozenset(" \t'\"\\")
"""What Quadlet's generated RequiresMountsFor= cannot carry."""
HEALTH_INTERVAL = 5
HEALTH_RETRIES = 3

# What Podman passes through for each driver: NVIDIA's CDI spec, the DRM and KFD nodes.
DEVICES = freeze(
    {
        "nvidia": ("nvidia.com/gpu=all",),
        "amdgpu": ("/dev/dri", "/dev/kfd"),
        "i915": ("/dev/dri",),
        "xe": ("/dev/dri",),
    }
)


def _q(value: str) -> str:
    # Quadlet copies every [Container] value into ExecStart=, where systemd expands $NAME.
    return plain(value, dollar=True)


def _why(field: str, value: str, why: str, source: str = "default") -> Origin:
    return Origin(field=field, value=value, source=source, why=why)


def emit_quadlet(s: Shape, options: EmitOptions) -> tuple[dict[str, str], list[Origin]]:
    p = s.profile
    if not p.image_http_get:
        raise EmitError(f"no health command is known for the {p.binary} images")
    origins: list[Origin] = []
    try:
        container = _container(s, options, origins)
        description = plain(f"exedra-engine: {p.binary} {s.name} (container)")
    except Unwritable as e:
        raise EmitError(f"Quadlet cannot be given this plan: {e}") from None
    container += _devices(s, origins) + _needs(s, origins)
    if s.memory is not None:
        container.append(("Memory", f"{s.memory.limit}m"))
        origins.append(
            _why(
                "Container.Memory",
                f"{s.memory.limit}m",
                f"the peak + the margin: the container is killed beyond ({s.memory.why})",
                "plan",
            )
        )
    service = [
        ("TimeoutStartSec", f"{s.start_budget + HEALTH_INTERVAL * HEALTH_RETRIES}s"),
        ("TimeoutStopSec", f"{s.stop_timeout + 5}s"),
        ("Restart", "on-failure"),
        ("RestartSec", f"{RESTART_DELAY}s"),
    ]
    origins += [
        _why(
            "Service.TimeoutStartSec",
            service[0][1],
            f"the start budget + {HEALTH_RETRIES} health checks {HEALTH_INTERVAL} s apart "
            "(podman extends it while it pulls the image)",
        ),
        _why("Service.TimeoutStopSec", service[1][1], "the stop timeout + 5 s for podman"),
        _why("Service.Restart", "on-failure", "a crash restarts; a clean stop does not"),
        _why("Service.RestartSec", f"{RESTART_DELAY}s", "a crash loop cannot spin"),
        _why("Unit.Description", description, "the executor and the name"),
        _why("Unit.After", "network-online.target", "the published address exists first"),
        _why("Unit.Wants", "network-online.target", "the published address exists first"),
        _why("Install.WantedBy", "default.target", "started at boot once enabled"),
    ]
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


def _container(s: Shape, options: EmitOptions, origins: list[Origin]) -> list[tuple[str, str]]:
    p = s.profile
    args, env = container_argv(s)
    url = base_url(s.plan.host, s.plan.port) + s.plan.ready
    health = json.dumps([*p.image_http_get, url], ensure_ascii=True)
    container: list[tuple[str, str]] = [
        ("ContainerName", _q(s.name)),
        ("Image", _q(s.image)),
        ("Entrypoint", _q(s.image_command)),
        ("Exec", " ".join(exec_word(a) for a in args)),
        ("User", str(options.uid)),
        ("Group", str(options.uid)),
    ]
    container += [("Environment", env_assignment(n, v, dollar=True)) for n, v in env]
    container += _volumes(s, options, origins)
    if s.keyed:
        owner = f"uid={options.uid},gid={options.uid}"
        secret = f"{s.secret},type=mount,target={key_path(s)},{owner},mode=0400"
        container.append(("Secret", _q(secret)))
        origins.append(_why("Container.Secret", secret, "the key as a file, never in the env"))
    publish = f"{options.publish_address}:" if options.publish_address else ""
    if ":" in options.publish_address:
        publish = f"[{options.publish_address}]:"
    container.append(("PublishPort", _q(f"{publish}{s.plan.port}:{s.plan.port}")))
    container += [
        ("HealthCmd", _q(health)),
        ("HealthInterval", f"{HEALTH_INTERVAL}s"),
        ("HealthRetries", str(HEALTH_RETRIES)),
        ("HealthStartPeriod", f"{s.start_budget}s"),
        ("Notify", "healthy"),
        ("ReadOnly", "true"),
        ("NoNewPrivileges", "true"),
        ("DropCapability", "all"),
        ("StopTimeout", str(s.stop_timeout)),
    ]
    origins += [
        _why("Container.ContainerName", s.name, "see name"),
        _why("Container.Image", s.image, "see image"),
        _why("Container.Entrypoint", s.image_command, "see command"),
        _why(
            "Container.User",
            str(options.uid),
            "never root: a rootful Podman's root in the container is the host's "
            + ("(--uid)" if options.uid != EmitOptions().uid else "(65532, as for Kubernetes)"),
            "option" if options.uid != EmitOptions().uid else "default",
        ),
        _why("Container.Group", str(options.uid), "see Container.User"),
        _why(
            "Container.Exec",
            f"{len(args)} words",
            "the plan's argv: model files at their mount, the key as a file",
            "plan",
        ),
        _why(
            "Container.PublishPort",
            f"{publish}{s.plan.port}:{s.plan.port}",
            "the plan's port; published on loopback unless --publish-address says otherwise",
            "option" if options.publish_address != "127.0.0.1" else "default",
        ),
        _why(
            "Container.HealthCmd",
            health,
            "the plan's ready path, asked inside the container with the image's curl",
        ),
        _why(
            "Container.HealthInterval", f"{HEALTH_INTERVAL}s", "a loaded model is seen within 5 s"
        ),
        _why("Container.HealthRetries", str(HEALTH_RETRIES), "three misses make it unhealthy"),
        _why("Container.HealthStartPeriod", f"{s.start_budget}s", "the start budget"),
        _why("Container.Notify", "healthy", "the unit is active once the model is loaded"),
        _why("Container.ReadOnly", "true", "a read-only root (podman mounts a tmpfs on /tmp)"),
        _why("Container.NoNewPrivileges", "true", "no setuid escalation"),
        _why("Container.DropCapability", "all", "the server needs no capability"),
        _why(
            "Container.StopTimeout",
            str(s.stop_timeout),
            "the stop timeout: one SIGTERM, then this long",
        ),
    ]
    if env:
        origins.append(
            _why(
                "Container.Environment",
                " ".join(n for n, _ in env),
                "the plan's env without keys (and the runtime's, see k8s container.env)",
                "plan",
            )
        )
    return container


def _volumes(s: Shape, options: EmitOptions, origins: list[Origin]) -> list[tuple[str, str]]:
    label = {Selinux.SHARED: ",z", Selinux.PRIVATE: ",Z"}.get(options.selinux, "")
    out = []
    for m in s.mounts:
        if ":" in m.host or "," in m.host:
            raise EmitError(
                f"the model path {m.host!r} holds ':' or ',', which Volume= reads as its "
                "separators: give --models-dir without them"
            )
        if any(c in m.host for c in _UNQUOTED):
            # Quadlet (5.4) copies the source into RequiresMountsFor= unquoted, which
            # systemd then splits or refuses: the generated unit is not the one planned.
            raise EmitError(
                f"the model path {m.host!r} holds a space, a quote or a backslash, which "
                "Quadlet writes unquoted into RequiresMountsFor=: move the model, or give "
                "--models-dir without them"
            )
        out.append(("Volume", _q(f"{m.host}:{m.container}:ro{label}")))
    origins.append(
        _why(
            "Container.Volume",
            " ".join(f"{m.host}:{m.container}" for m in s.mounts),
            "the model files read-only (see models dir)"
            + (f"; SELinux relabel {label[1:]} (--selinux {options.selinux})" if label else ""),
            "plan",
        )
    )
    if options.selinux is Selinux.DISABLE:
        out.append(("SecurityLabelDisable", "true"))
        origins.append(
            _why("Container.SecurityLabelDisable", "true", "--selinux disable", "option")
        )
    return out


def _devices(s: Shape, origins: list[Origin]) -> list[tuple[str, str]]:
    if s.gpu is None:
        return []
    devices = DEVICES.get(s.gpu.driver, ("/dev/dri",))
    out = [("AddDevice", d) for d in devices]
    origins.append(
        _why(
            "Container.AddDevice",
            " ".join(devices),
            f"the {s.gpu.driver} driver's devices",
            "probe",
        )
    )
    if s.gpu.driver != "nvidia":
        out.append(("GroupAdd", "keep-groups"))
        origins.append(
            _why(
                "Container.GroupAdd",
                "keep-groups",
                "the caller's groups (render) open the device nodes (crun only)",
            )
        )
    return out


def _needs(s: Shape, origins: list[Origin]) -> list[tuple[str, str]]:
    out = []
    for need, flag in s.needs:
        if need == "priority":
            out.append(("AddCapability", "SYS_NICE"))
            origins.append(
                _why("Container.AddCapability", "SYS_NICE", f"{flag} raises the priority", "plan")
            )
        elif need == "memlock":
            out.append(("Ulimit", "memlock=-1:-1"))
            origins.append(
                _why(
                    "Container.Ulimit", "memlock=-1:-1", f"{flag} locks the model in memory", "plan"
                )
            )
    return out


# -- checks: the files read back, as their engine and the executor read them ----------------


def check_quadlet(plan: LaunchPlan, text: str, p: ExecutorProfile) -> list[str]:
    """What is wrong with the ``.container`` unit `text` as a deployment of `plan`."""
    s = ini.read_ini(text)
    try:
        argv = [w for e in ini.setting(s, "Container", "Exec") for w in words(e, {})]
        env = [
            ini.expand_dollars(w)
            for e in ini.setting(s, "Container", "Environment")
            for w in env_words(e)
        ]
    except ValueError as e:
        return [f"Exec= or Environment= does not parse: {e}"]
    out = _quadlet_values(s)
    out += _user_problems(ini.setting(s, "Container", "User"))
    problems, key_dirs = _secret_problems(ini.setting(s, "Container", "Secret"))
    out += problems
    out += argv_problems(p, plan, argv, [*p.image_env, *env], key_dirs)
    out += _health_problems(plan, ini.setting(s, "Container", "HealthCmd"))
    if ini.setting(s, "Container", "Notify")[-1:] != ["healthy"]:
        out.append("Notify= is not healthy: the unit would be started before the model loads")
    published = [
        ini.expand_dollars(v).rsplit(":", 1)[-1] for v in ini.setting(s, "Container", "PublishPort")
    ]
    if str(plan.port) not in published:
        out.append(f"no PublishPort= publishes the container's port {plan.port}")
    if not ini.setting(s, "Service", "TimeoutStartSec"):
        out.append("no TimeoutStartSec=: systemd's 90 s default would kill a long load")
    return out + memory_problems(plan, ini.setting(s, "Container", "Memory"), "Memory=")


def _user_problems(users: list[str]) -> list[str]:
    user = users[-1].split(":", 1)[0] if users else ""
    if not user:
        return ["no User=: the container runs as root (the host's root under a rootful Podman)"]
    if user in ("0", "root"):
        return [f"User={users[-1]}: the container runs as root"]
    return []


def _secret_problems(values: list[str]) -> tuple[list[str], list[str]]:
    out = []
    key_dirs = []
    for parts in (v.split(",") for v in values):
        opts = dict(x.partition("=")[::2] for x in parts[1:])
        if opts.get("type") != "mount":
            out.append(f"Secret={parts[0]} is not type=mount")
        target = opts.get("target", f"/run/secrets/{parts[0]}")
        key_dirs.append(target.rsplit("/", 1)[0])
    return out, key_dirs


def _health_problems(plan: LaunchPlan, health: list[str]) -> list[str]:
    if not health:
        return ["no HealthCmd= asks the ready path"]
    out = []
    for h in health:
        urls = re.findall(r"https?://\S+?(?=[\"'\s]|$)", h)
        if not urls:
            out.append(f"HealthCmd= {h!r} asks no URL")
        for url in urls:
            out += url_problems("HealthCmd=", url, plan)
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
            if problem := mount_problem(source):
                out.append(f"Volume= mounts {problem}")
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
