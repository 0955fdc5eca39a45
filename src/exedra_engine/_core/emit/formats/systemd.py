"""systemd: a service that runs the executor itself, built as INI data and written with
systemd's escaping (`exedra_engine._core.emit.formats.ini`).

The key arrives as a credential (``LoadCredential=`` and ``--api-key-file %d/api-key``):
``Environment=`` is readable through D-Bus and /proc. One SIGTERM stops the executor
(``KillMode=mixed``: a second signal would make it exit at once); readiness is an
``ExecStartPost=`` that waits for the ready path; hardening follows nixpkgs' llama-cpp unit,
minus what the plan's GPU needs.
"""

from __future__ import annotations

from exedra_engine._core.emit.formats import ini
from exedra_engine._core.emit.formats.ini import (
    Section,
    Unwritable,
    env_assignment,
    exec_line,
    exec_word,
    plain,
    write_ini,
)
from exedra_engine._core.emit.formats.readback import argv_problems, env_words, url_problems, words
from exedra_engine._core.emit.keys import KEY_NAME, plan_is_keyed
from exedra_engine._core.emit.limits import bytes_of
from exedra_engine._core.emit.options import EmitOptions, Origin
from exedra_engine._core.emit.shape import Shape
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.plan.load_files import unit_files
from exedra_engine._core.struct import freeze
from exedra_engine._core.values import base_url
from exedra_engine.errors import EmitError

RESTART_DELAY = 5
"""Seconds between a crash and the restart: a crash loop cannot spin."""

# Device groups (/proc/devices names; globs allowed) each driver's user-space opens.
DEVICE_ALLOW = freeze(
    {
        "nvidia": ("char-nvidia*",),
        "amdgpu": ("char-drm", "char-kfd"),
        "i915": ("char-drm",),
        "xe": ("char-drm",),
    }
)

_HARDENING: tuple[tuple[str, str, str], ...] = (
    ("DynamicUser", "yes", "a fresh unprivileged user per start (implies PrivateTmp=yes)"),
    ("CapabilityBoundingSet", "", "no capability: the server needs none"),
    ("NoNewPrivileges", "yes", "no setuid escalation"),
    ("PrivateTmp", "yes", "a private /tmp (DynamicUser implies it)"),
    ("ProtectSystem", "strict", "the whole file system read-only"),
    ("ProtectKernelTunables", "yes", "/proc/sys and /sys read-only"),
    ("ProtectKernelModules", "yes", "no module loading (load nvidia-uvm at boot)"),
    ("ProtectKernelLogs", "yes", "no kernel log access"),
    ("ProtectControlGroups", "yes", "the cgroup tree read-only"),
    ("ProtectClock", "yes", "no clock changes"),
    ("ProtectHostname", "yes", "no hostname changes"),
    ("ProtectProc", "invisible", "other processes hidden in /proc"),
    ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX", "IP and local sockets only"),
    ("RestrictNamespaces", "yes", "no new namespaces"),
    ("RestrictRealtime", "yes", "no realtime scheduling"),
    ("RestrictSUIDSGID", "yes", "no setuid files"),
    ("LockPersonality", "yes", "no personality changes"),
    ("RemoveIPC", "yes", "IPC objects removed at stop"),
    ("SystemCallArchitectures", "native", "native system calls only"),
    ("SystemCallFilter", "@system-service", "the system calls of a service"),
    ("SystemCallFilter", "~@privileged @resources", "minus privileged and resource calls"),
    ("SystemCallErrorNumber", "EPERM", "a denied call fails, it does not kill"),
    ("UMask", "0077", "files private to the service"),
    ("DevicePolicy", "closed", "devices closed but the standard pseudo-devices and DeviceAllow="),
)
# What each need (`ExecutorProfile.resource_flags`) is given instead of the default.
_NEEDS: dict[str, tuple[tuple[str, str], ...]] = freeze(
    {
        # setpriority(2) below nice 0 and SCHED_FIFO threads: allowed by limits, no capability.
        "priority": (
            ("RestrictRealtime", "no"),
            ("LimitNICE", "-20"),
            ("LimitRTPRIO", "99"),
        ),
        "affinity": (),
        "memlock": (("LimitMEMLOCK", "infinity"),),
    }
)
_TMP = ("/tmp/", "/var/tmp/")


def emit_systemd(s: Shape, options: EmitOptions) -> tuple[dict[str, str], list[Origin]]:
    p = s.profile
    _refuse_tmp(s)
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
    waiter_given = options.waiter != EmitOptions().waiter
    origins += [
        _why("Service.Type", "exec", "the executor does not notify systemd (no sd_notify)"),
        _why("Service.ExecStart", s.plan.command, "the plan's command and argv, escaped", "plan"),
        _why(
            "Service.ExecStartPost",
            f"{options.waiter} wait-ready {url}",
            "the executor does not notify systemd; the unit is started once the ready "
            "path answers 200 ("
            + ("--waiter" if waiter_given else "the exedra-engine that emitted, its real path")
            + ")",
            "option" if waiter_given else "default",
        ),
    ]
    service += [("Environment", e) for e in env]
    if env:
        origins.append(
            _why(
                "Service.Environment",
                " ".join(n for n, _ in s.env),
                "the plan's env without keys",
                "plan",
            )
        )
    if s.keyed:
        if not s.key_file.startswith("/"):
            raise EmitError(f"key file {s.key_file!r} is not an absolute path")
        service.append(("LoadCredential", f"{KEY_NAME}:{key_file}"))
        origins.append(
            _why(
                "Service.LoadCredential",
                f"{KEY_NAME}:{key_file}",
                "the key as a credential file (%d): Environment= is readable through D-Bus",
            )
        )
    service += [
        ("KillMode", "mixed"),
        ("KillSignal", "SIGTERM"),
        ("SendSIGHUP", "no"),
        ("TimeoutStartSec", f"{s.start_budget}s"),
        ("TimeoutStopSec", f"{s.stop_timeout}s"),
        ("Restart", "on-failure"),
        ("RestartSec", f"{RESTART_DELAY}s"),
    ]
    origins += [
        _why(
            "Service.KillMode",
            "mixed",
            "one SIGTERM to the executor: a second makes it exit at once",
        ),
        _why("Service.KillSignal", "SIGTERM", "the executor's graceful stop"),
        _why("Service.SendSIGHUP", "no", "no second signal"),
        _why(
            "Service.TimeoutStartSec",
            f"{s.start_budget}s",
            "the start budget: ExecStartPost waits that long at most",
        ),
        _why("Service.TimeoutStopSec", f"{s.stop_timeout}s", "the stop timeout"),
        _why("Service.Restart", "on-failure", "a crash restarts; a clean stop does not"),
        _why("Service.RestartSec", f"{RESTART_DELAY}s", "a crash loop cannot spin"),
    ]
    service += _memory(s, origins)
    service += _hardening(s, models, origins)
    unit = [
        ("Description", description),
        ("After", "network-online.target"),
        ("Wants", "network-online.target"),
    ]
    origins += [
        _why("Unit.Description", description, "the executor and the name"),
        _why("Unit.After", "network-online.target", "the bind address exists before the start"),
        _why("Unit.Wants", "network-online.target", "the bind address exists before the start"),
        _why("Install.WantedBy", "multi-user.target", "started at boot once enabled"),
    ]
    sections: list[Section] = [
        ("Unit", unit),
        ("Service", service),
        ("Install", [("WantedBy", "multi-user.target")]),
    ]
    header = [f"{s.name}: emitted by exedra-engine from a plan; edit the plan, not this file."]
    if s.keyed:
        header.append(f"The key: install -m 0400 KEYFILE {key_file}")
    if s.gpu is not None and s.gpu.backend == "cuda":
        header.append("CUDA needs nvidia-uvm loaded at boot: the unit may not load modules.")
    return {f"{s.name}.service": write_ini(sections, header)}, origins


def _memory(s: Shape, origins: list[Origin]) -> list[tuple[str, str]]:
    if s.memory is None:
        return []
    origins += [
        _why(
            "Service.MemoryHigh",
            f"{s.memory.high}M",
            f"the peak + half the margin: reclaim starts here ({s.memory.why})",
            "plan",
        ),
        _why(
            "Service.MemoryMax",
            f"{s.memory.limit}M",
            f"the peak + the margin: the unit is killed beyond ({s.memory.why})",
            "plan",
        ),
    ]
    return [("MemoryHigh", f"{s.memory.high}M"), ("MemoryMax", f"{s.memory.limit}M")]


def _why(field: str, value: str, why: str, source: str = "default") -> Origin:
    return Origin(field=field, value=value, source=source, why=why)


def _refuse_tmp(s: Shape) -> None:
    for f in s.model_files:
        if f.startswith(_TMP):
            raise EmitError(
                f"model file {f} is under {f[: f.index('/', 1) + 1]}: the unit's DynamicUser= "
                "gives it a private /tmp and /var/tmp where the file does not exist; move the "
                "model elsewhere"
            )


def _hardening(s: Shape, models: list[str], origins: list[Origin]) -> list[tuple[str, str]]:
    out = _hardened(dict(s.needs), origins)
    home = any(f == "/home" or f.startswith(("/home/", "/root/", "/run/user/")) for f in models)
    out.insert(4, ("ProtectHome", "read-only" if home else "yes"))
    origins.append(
        _why(
            "Service.ProtectHome",
            "read-only" if home else "yes",
            "a model file is under a home directory" if home else "home directories hidden",
            "plan" if home else "default",
        )
    )
    return out + _devices(s, origins)


def _hardened(needs: dict[str, str], origins: list[Origin]) -> list[tuple[str, str]]:
    """The hardening list, relaxed where a flag of the plan needs it (`_NEEDS`)."""
    replaced = {k: v for need in needs for k, v in _NEEDS[need]}
    relax = "priority" in needs or "affinity" in needs
    out: list[tuple[str, str]] = []
    for key, default, reason in _HARDENING:
        value, why = default, reason
        if key == "SystemCallFilter" and "@resources" in value and relax:
            flag = needs.get("priority") or needs["affinity"]
            value, why = "~@privileged", f"minus privileged calls; {flag} needs @resources"
        if key in replaced:
            value, why = replaced.pop(key), f"{needs_flag(needs, key)} needs it"
        out.append((key, value))
        origins.append(_why(f"Service.{key}", value, why))
    for key, value in replaced.items():
        out.append((key, value))
        origins.append(_why(f"Service.{key}", value, f"{needs_flag(needs, key)} needs it", "plan"))
    return out


def needs_flag(needs: dict[str, str], key: str) -> str:
    """The flag that asked for `key`'s relaxed value."""
    return next(needs[n] for n, pairs in _NEEDS.items() if n in needs and key in dict(pairs))


def _devices(s: Shape, origins: list[Origin]) -> list[tuple[str, str]]:
    if s.gpu is None:
        cpu = [
            ("PrivateDevices", "yes"),
            ("PrivateUsers", "yes"),
            ("MemoryDenyWriteExecute", "yes"),
        ]
        origins += [
            _why("Service.PrivateDevices", "yes", "the plan runs on the CPU: no device nodes"),
            _why("Service.PrivateUsers", "yes", "no other user is seen"),
            _why(
                "Service.MemoryDenyWriteExecute",
                "yes",
                "the CPU backend compiles nothing at run time",
            ),
        ]
        return cpu
    allowed = sorted(
        set(DEVICE_ALLOW.get(s.gpu.driver, ("char-drm",)))
        | ({"char-drm"} if s.gpu.backend == "vulkan" else set())
    )
    out = [("DeviceAllow", f"{d} rw") for d in allowed]
    out += [("SupplementaryGroups", "render video"), ("MemoryDenyWriteExecute", "no")]
    origins += [
        _why(
            "Service.DeviceAllow",
            " ".join(allowed),
            f"the {s.gpu.driver} driver's device groups",
            "probe",
        ),
        _why(
            "Service.SupplementaryGroups",
            "render video",
            "the groups that open GPU device nodes (root:render 0660)",
        ),
        _why("Service.MemoryDenyWriteExecute", "no", "GPU drivers compile kernels at run time"),
    ]
    return out


# -- checks: the files read back, as their engine and the executor read them ----------------


def check_systemd(plan: LaunchPlan, text: str, p: ExecutorProfile) -> list[str]:
    """What is wrong with the unit `text` as a deployment of `plan`."""
    s = ini.read_ini(text)
    cred = "/run/credentials/UNIT"
    starts = ini.setting(s, "Service", "ExecStart")
    if len(starts) != 1:
        return [f"{len(starts)} ExecStart= lines, not one"]
    try:
        argv = words(starts[0], {"d": cred, "n": "UNIT"})
        env = [w for e in ini.setting(s, "Service", "Environment") for w in env_words(e)]
    except ValueError as e:
        return [f"ExecStart= or Environment= does not parse: {e}"]
    out: list[str] = []
    if argv[:1] != [plan.command]:
        out.append(f"ExecStart= runs {argv[:1]}, not the plan's {plan.command}")
    creds = ini.setting(s, "Service", "LoadCredential")
    if plan_is_keyed(plan, p) and not creds:
        out.append("the plan is keyed but no LoadCredential= brings the key")
    out += argv_problems(p, plan, argv[1:], env, [cred] if creds else [])
    if ini.setting(s, "Service", "EnvironmentFile"):
        out.append("EnvironmentFile= is readable through D-Bus and /proc: no secrets there")
    out += _post_problems(plan, ini.setting(s, "Service", "ExecStartPost"))
    out += _service_problems(s)
    out += memory_problems(plan, ini.setting(s, "Service", "MemoryMax"), "MemoryMax=")
    if ini.setting(s, "Service", "DynamicUser")[-1:] == ["yes"]:
        out += [
            f"{f} is under a /tmp that DynamicUser= makes private to the unit"
            for f in _model_paths(p, argv[1:], env)
            if f.startswith(_TMP)
        ]
    return out


def _post_problems(plan: LaunchPlan, posts: list[str]) -> list[str]:
    if not posts:
        return ["no ExecStartPost= waits for the ready path"]
    out = []
    for post in posts:
        try:
            said = words(post, {})
        except ValueError as e:
            out.append(f"ExecStartPost= does not parse: {e}")
            continue
        out += url_problems("ExecStartPost=", said[-1] if said else "", plan)
    return out


def _service_problems(s: dict[str, list[tuple[str, str]]]) -> list[str]:
    out = []
    for key, want in (("KillMode", "mixed"), ("KillSignal", "SIGTERM"), ("SendSIGHUP", "no")):
        if ini.setting(s, "Service", key)[-1:] != [want]:
            out.append(f"{key}= is not {want}")
    for key in ("TimeoutStartSec", "TimeoutStopSec"):
        if not ini.setting(s, "Service", key):
            out.append(f"no {key}=")
    return out


def _model_paths(p: ExecutorProfile, args: list[str], env: list[str]) -> list[str]:
    return [path for path, _ in unit_files(p, args, env)]


def memory_problems(plan: LaunchPlan, values: list[str], what: str) -> list[str]:
    """A memory limit (systemd's or podman's units) below the plan's expected peak."""
    if plan.memory is None or not values:
        return []
    got = bytes_of(values[-1], k8s=False)
    if got is not None and got < plan.memory.host.total:
        return [
            f"{what} {values[-1]} is below the plan's expected resident peak "
            f"{plan.memory.host.total} bytes: the unit would be OOM-killed"
        ]
    return []
