"""The devices an installed executor sees: ``BINARY --list-devices`` run bounded
(`exedra_engine._shell.local.bounded_run`, within the ``--help`` probe's time:
`exedra_engine._shell.local.flag_tables.TIMEOUT`), under a given environment, read as
hostile input (`exedra_engine._core.host.devices.parse_device_list`), cached.

Which devices a binary sees depends on the variables its backends read
(``CUDA_VISIBLE_DEVICES``, ``GGML_VK_VISIBLE_DEVICES``...: the profile's `device_env`), so
the list is asked under the plan's own values of them and cached by the binary (real path,
size, modification time) and those values. The cache is one JSON file per binary and
environment in ``${XDG_CACHE_HOME:-~/.cache}/exedra-engine/devices/``, written atomically;
an entry older than `FRESH` seconds is asked again (free memory moves). A binary that cannot
be run, hangs or floods is not cached: its devices are unknown (the kernel's GPUs are
planned with), and `devices_problem` says why, naming it. One that runs and answers what
llama.cpp does not print (a build without the flag, a wrapper) answers so every time: that
refusal is cached for the binary as it is (its size and modification time), so a plan does
not run it again for nothing.
"""

from __future__ import annotations

import os
import re
import time
import zlib
from collections.abc import Mapping

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.host.devices import (
    MAX_DEVICE_LIST,
    Device,
    DeviceListError,
    device_problems,
    parse_device_list,
)
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.struct import Value
from exedra_engine._core.values import Hardware
from exedra_engine._shell import notice

FRESH = 60.0
"""Seconds a cached list is used for: a plan then a launch reuse it; free memory is read
again after."""
_MAX_ERR = 1 << 20

_problems: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
"""Why a binary's device list could not be had in this process, by binary and environment:
asked once per process (a binary that hangs costs its timeout once), again in the next."""


class _Entry(Value, frozen=True, kw_only=True):
    path: str
    size: int
    mtime_ns: int
    env: tuple[tuple[str, str], ...]
    at: float
    """When it was listed (seconds since the epoch)."""
    devices: tuple[Device, ...]
    refused: str = ""
    """Why the binary's answer is no device list ("": it is one): kept as long as the
    binary is unchanged, whatever `at` says."""


def devices_cache_dir() -> str:
    """Where device lists are cached."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "exedra-engine", "devices")


def device_env(profile: ExecutorProfile, env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The variables of `env` that change which devices the executor of `profile` sees."""
    return tuple((k, env[k]) for k in profile.device_env if k in env)


def executor_devices(
    profile: ExecutorProfile, path: str, env: Mapping[str, str] | None = None
) -> tuple[Device, ...] | None:
    """The devices the binary at `path` lists under `env` (this process's environment by
    default); None when it has no device list (`profile.list_devices_flag` is "") or its
    answer could not be had or believed (`devices_problem` says why)."""
    if not profile.list_devices_flag:
        return None
    env = dict(os.environ if env is None else env)
    selected = device_env(profile, env)
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):
        return None
    key = (real, selected)
    if key in _problems:
        return None
    devices, problem = _cached_or_asked(profile, path, env, (real, st, selected))
    if devices is None:
        _problems[key] = problem
        # Said once per process where the command line listens: the plan goes on with the
        # kernel's GPUs, and the reason is not lost.
        notice.say(f"{problem}; its devices are unknown, the kernel's GPUs are planned with")
    return devices


def _cached_or_asked(
    profile: ExecutorProfile,
    path: str,
    env: Mapping[str, str],
    binary: tuple[str, os.stat_result, tuple[tuple[str, str], ...]],
) -> tuple[tuple[Device, ...] | None, str]:
    """The devices from the cache, else asked of the binary and cached (a refusal it will
    repeat too); or None and why."""
    real, st, selected = binary
    entry = os.path.join(
        devices_cache_dir(), _entry_name(real, st.st_size, st.st_mtime_ns, selected)
    )
    cached = _read(entry, real, st.st_size, st.st_mtime_ns, selected)
    if isinstance(cached, str):
        return None, cached
    if cached is not None:
        return cached, ""
    devices, problem, answered = _listed(profile, path, env)
    if devices is not None or answered:  # the same binary answers the same while unchanged
        found = _Entry(
            path=real,
            size=st.st_size,
            mtime_ns=st.st_mtime_ns,
            env=selected,
            at=time.time(),
            devices=devices or (),
            refused="" if devices is not None else problem,
        )
        _write(entry, found)
    return devices, problem


def devices_problem(
    profile: ExecutorProfile, path: str, env: Mapping[str, str] | None = None
) -> str:
    """Why the binary at `path` gave no device list in this process under `env` ("" if it
    gave one, or was not asked)."""
    try:
        real = os.path.realpath(path)
    except (OSError, ValueError):
        return ""
    selected = device_env(profile, dict(os.environ if env is None else env))
    return _problems.get((real, selected), "")


def list_devices(
    profile: ExecutorProfile, path: str, env: Mapping[str, str]
) -> tuple[tuple[Device, ...] | None, str]:
    """Ask the binary, uncached: its devices, or None and why not (naming the binary)."""
    devices, problem, _ = _listed(profile, path, env)
    return devices, problem


def _listed(
    profile: ExecutorProfile, path: str, env: Mapping[str, str]
) -> tuple[tuple[Device, ...] | None, str, bool]:
    """`list_devices`, and whether the binary ran and answered (a refusal it will repeat,
    unlike a hang, a flood or a failure to run it)."""
    from exedra_engine._shell.local import flag_tables
    from exedra_engine._shell.local.bounded_run import ask_binary

    flag = profile.list_devices_flag
    ran = ask_binary(
        [path, flag],
        timeout=flag_tables.TIMEOUT,
        max_output=max(MAX_DEVICE_LIST, _MAX_ERR),
        env=env,
        slow=flag_tables.SLOW,
    )
    if ran.problem:
        return None, ran.problem, False
    if len(ran.out) > MAX_DEVICE_LIST:
        why = f"{path} {flag} printed {len(ran.out)} bytes: more than {MAX_DEVICE_LIST}"
        return None, why, False
    try:
        return parse_device_list(ran.out.decode("utf-8", errors="replace")), "", True
    except DeviceListError as e:
        said = _last_line(ran.err)
        return None, f"{path} {flag}: {e}" + (f" (it said: {said})" if said else ""), True


def _last_line(err: bytes) -> str:
    lines = [ln.strip() for ln in err.decode("utf-8", errors="replace").splitlines() if ln.strip()]
    if not lines:
        return ""
    last = "".join(c if c.isprintable() else "?" for c in lines[-1])
    return last if len(last) <= 120 else last[:117] + "..."


def _entry_name(real: str, size: int, mtime_ns: int, env: tuple[tuple[str, str], ...]) -> str:
    tail = re.sub(r"[^A-Za-z0-9._-]", "_", real)[-100:]
    # crc32, not sha256: every plan names an entry, and hashlib (OpenSSL) costs a cold plan
    # ~3 ms to import; the entry holds its environment, so a collision is only a miss.
    digest = f"{zlib.crc32(msgspec.json.encode(env)):08x}"
    return f"{tail}-{size}-{mtime_ns}-{digest}.json"


def _read(
    entry: str, real: str, size: int, mtime_ns: int, env: tuple[tuple[str, str], ...]
) -> tuple[Device, ...] | str | None:
    """The cached devices, or the binary's cached refusal (a str), or None (ask it)."""
    from exedra_engine._shell.local.files import read_regular

    try:
        e = msgspec.json.decode(read_regular(entry, 4 * MAX_DEVICE_LIST), type=_Entry)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    if (e.path, e.size, e.mtime_ns, e.env) != (real, size, mtime_ns, env):
        return None
    if e.refused:
        return e.refused
    if not 0 <= time.time() - e.at <= FRESH or device_problems(e.devices, "$"):
        return None
    return e.devices


def _write(entry: str, e: _Entry) -> None:
    from exedra_engine._shell.local.files import write_cache_entry

    write_cache_entry(entry, msgspec.json.encode(e))


def devices_for_plan(
    hw: Hardware, plan: LaunchPlan, *, executors: Executors = BUILTIN
) -> Hardware | None:
    """`hw` with the plan's executor's devices as it would see them under the plan's own
    environment (a layer's ``CUDA_VISIBLE_DEVICES`` or ``GGML_VK_VISIBLE_DEVICES`` counts),
    where that differs from what `hw` records: the binary not listed yet (``--executor
    PATH``), or listed under other values of the profile's `device_env`. None when `hw`
    holds already, or when the devices a plan places on are the same either way. For this
    host's plans only: a plan from a hardware file runs nothing."""
    from exedra_engine._core.launch.environ import child_environment

    profile = executors.profile(plan.spec.kind)
    exe = hw.executor(plan.spec.kind)
    if exe is None or not profile.list_devices_flag:
        return None
    env = child_environment(plan, os.environ, executors=executors)
    chosen_by = device_env(profile, env)
    if exe.listed() and chosen_by == exe.devices_env:
        return None
    devices = executor_devices(profile, exe.path, env)
    listed = msgspec.structs.replace(
        exe,
        devices=devices or (),
        devices_listed=devices is not None,
        devices_env=chosen_by if devices is not None else (),
    )
    if listed == exe:
        return None
    others = tuple(listed if e is exe else e for e in hw.executors)
    seen = msgspec.structs.replace(hw, executors=others)
    kind = plan.spec.kind
    if seen.offload_devices(kind) == hw.offload_devices(kind):
        return None  # the same devices to place on: the plan stands, planned once
    return seen
