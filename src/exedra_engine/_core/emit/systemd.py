"""systemd: a service that runs the executor itself, built as INI data and written with
systemd's escaping (`exedra_engine._core.emit.ini`).

The key arrives as a credential (``LoadCredential=`` and ``--api-key-file %d/api-key``):
``Environment=`` is readable through D-Bus and /proc. One SIGTERM stops the executor
(``KillMode=mixed``: a second signal would make it exit at once); readiness is an
``ExecStartPost=`` that waits for the ready path; hardening follows nixpkgs' llama-cpp unit,
minus what the plan's GPU needs.
"""

from __future__ import annotations

from exedra_engine._core.emit.ini import (
    Section,
    Unwritable,
    env_assignment,
    exec_line,
    exec_word,
    plain,
    write_ini,
)
from exedra_engine._core.emit.shape import KEY_NAME, EmitOptions, Origin, Shape
from exedra_engine._core.executors import executor_profile
from exedra_engine._core.values import base_url
from exedra_engine.errors import EmitError

RESTART_DELAY = 5
"""Seconds between a crash and the restart: a crash loop cannot spin."""

# Device groups (/proc/devices names; globs allowed) each driver's user-space opens.
DEVICES = {
    "nvidia": ("char-nvidia*",),
    "amdgpu": ("char-drm", "char-kfd"),
    "i915": ("char-drm",),
    "xe": ("char-drm",),
}

_HARDENING: tuple[tuple[str, str], ...] = (
    ("DynamicUser", "yes"),
    ("CapabilityBoundingSet", ""),
    ("NoNewPrivileges", "yes"),
    ("PrivateTmp", "yes"),
    ("ProtectSystem", "strict"),
    ("ProtectKernelTunables", "yes"),
    ("ProtectKernelModules", "yes"),
    ("ProtectKernelLogs", "yes"),
    ("ProtectControlGroups", "yes"),
    ("ProtectClock", "yes"),
    ("ProtectHostname", "yes"),
    ("ProtectProc", "invisible"),
    ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
    ("RestrictNamespaces", "yes"),
    ("RestrictRealtime", "yes"),
    ("RestrictSUIDSGID", "yes"),
    ("LockPersonality", "yes"),
    ("RemoveIPC", "yes"),
    ("SystemCallArchitectures", "native"),
    ("SystemCallFilter", "@system-service"),
    ("SystemCallFilter", "~@privileged @resources"),
    ("SystemCallErrorNumber", "EPERM"),
    ("UMask", "0077"),
    ("DevicePolicy", "closed"),
)


def emit_systemd(s: Shape, options: EmitOptions) -> tuple[dict[str, str], list[Origin]]:
    p = executor_profile(s.profile_kind)
    origins: list[Origin] = []
    try:
        # The credential path is a specifier: written unescaped, after the escaped args.
        exec_start = exec_line(s.plan.command, s.args)
        if s.keyed:
            exec_start += f' {exec_word(p.key_file_flag)} "%d/{KEY_NAME}"'
        url = base_url(s.plan.host, s.plan.port) + s.plan.ready
        waiter = exec_line(options.waiter, ["wait-ready", "--timeout", str(s.start_budget), url])
        env = [env_assignment(n, v) for n, v in s.env]
        key_file = plain(s.key_file)
        description = plain(f"exedra-engine: {p.binary} {s.name}")
        models = [plain(f) for f in s.model_files]
    except Unwritable as e:
        raise EmitError(f"systemd cannot be given this plan: {e}") from None
    service: list[tuple[str, str]] = [
        ("Type", "exec"),
        ("ExecStart", exec_start),
        ("ExecStartPost", waiter),
    ]
    origins.append(
        Origin(
            field="ExecStartPost",
            value=f"wait-ready {url}",
            source="default",
            why="the executor does not notify systemd; the unit is started once the ready "
            "path answers 200",
        )
    )
    service += [("Environment", e) for e in env]
    if s.keyed:
        if not s.key_file.startswith("/"):
            raise EmitError(f"key file {s.key_file!r} is not an absolute path")
        service.append(("LoadCredential", f"{KEY_NAME}:{key_file}"))
    service += [
        ("KillMode", "mixed"),
        ("KillSignal", "SIGTERM"),
        ("SendSIGHUP", "no"),
        ("TimeoutStartSec", f"{s.start_budget}s"),
        ("TimeoutStopSec", f"{s.stop_timeout}s"),
        ("Restart", "on-failure"),
        ("RestartSec", f"{RESTART_DELAY}s"),
    ]
    origins.append(
        Origin(
            field="TimeoutStartSec",
            value=f"{s.start_budget}s",
            source="default",
            why="the start budget: ExecStartPost waits that long at most",
        )
    )
    service += _hardening(s, models, origins)
    unit = [
        ("Description", description),
        ("After", "network-online.target"),
        ("Wants", "network-online.target"),
    ]
    sections: list[Section] = [
        ("Unit", unit),
        ("Service", service),
        ("Install", [("WantedBy", "multi-user.target")]),
    ]
    header = [f"{s.name}: emitted by exedra-engine from a plan; edit the plan, not this file."]
    if s.keyed:
        header.append(f"The key: install -m 0400 KEYFILE {key_file}")
    return {f"{s.name}.service": write_ini(sections, header)}, origins


def _hardening(s: Shape, models: list[str], origins: list[Origin]) -> list[tuple[str, str]]:
    out = list(_HARDENING)
    home = any(f == "/home" or f.startswith(("/home/", "/root/", "/run/user/")) for f in models)
    out.insert(4, ("ProtectHome", "read-only" if home else "yes"))
    if home:
        origins.append(
            Origin(
                field="ProtectHome",
                value="read-only",
                source="plan",
                why="a model file is under a home directory",
            )
        )
    if s.gpu is None:
        out += [
            ("PrivateDevices", "yes"),
            ("PrivateUsers", "yes"),
            ("MemoryDenyWriteExecute", "yes"),
        ]
        return out
    allowed = sorted(
        set(DEVICES.get(s.gpu.driver, ("char-drm",)))
        | ({"char-drm"} if s.gpu.backend == "vulkan" else set())
    )
    out += [("DeviceAllow", f"{d} rw") for d in allowed]
    out += [("SupplementaryGroups", "render video"), ("MemoryDenyWriteExecute", "no")]
    origins.append(
        Origin(
            field="DeviceAllow",
            value=" ".join(allowed),
            source="probe",
            why=f"the {s.gpu.driver} driver's device groups; GPU drivers compile kernels at run "
            "time, so MemoryDenyWriteExecute is off",
        )
    )
    return out
