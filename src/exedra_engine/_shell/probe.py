"""`probe`: gather a `HostSnapshot` through the ports, then interpret it purely."""

from __future__ import annotations

import posixpath
from collections.abc import Callable

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.host.devices import Device
from exedra_engine._core.host.hardware import (
    DrmNode,
    ExecutorFile,
    HostSnapshot,
    NvidiaProcGpu,
    hardware_from,
)
from exedra_engine._core.outcome import boundary
from exedra_engine._core.values import Hardware
from exedra_engine._shell.local.host import LocalHost
from exedra_engine._shell.local.ports import Host, HostFiles, HostProcess

DRM = "/sys/class/drm"
NVIDIA_GPUS = "/proc/driver/nvidia/gpus"
# Where GGML backend plugins sit relative to the directory of the executor's real binary.
_LIB_DIRS = (".", "../lib", "../lib64", "../lib/ggml", "../lib64/ggml")


Versions = Callable[[ExecutorProfile, str], str]
"""How an executor's version is learnt: (its profile, its path) -> the version it states."""
Devices = Callable[
    [ExecutorProfile, str], tuple[tuple[Device, ...] | None, tuple[tuple[str, str], ...]]
]
"""How an executor's devices are learnt: (its profile, its path) -> the devices it lists
(None: it has no list, or gave none to believe) and the variables that chose them."""


def host_hardware(host: Host | None = None, *, executors: Executors = BUILTIN) -> Hardware:
    """Inspect the host: CPU threads and RAM, DRM render devices, installed executors, their
    versions and the devices they see (``llama-server --list-devices``, under this
    process's environment).

    A host without /sys/class/drm is not an error: its GPUs are the nvidia driver's cards
    (/proc/driver/nvidia/gpus), if any, else it is a CPU-only host. `host` roots the reads
    elsewhere (fixture trees in tests); the calling process's environment is never changed.
    Versions and devices are asked of the binaries of this machine only (``BINARY
    --version`` and ``--list-devices``, bounded and cached, see
    `exedra_engine._shell.local.flag_tables` and `exedra_engine._shell.local.device_list`):
    with a `host`, they are "" and not listed.
    The executors looked for are those of `executors`. Probing cannot fail: unknown facts
    read as 0.
    """
    if host is not None:
        return hardware_from(snapshot(host, host, executors=executors))
    # This machine: after PATH, the executors scripts/install-executors.sh built.
    from exedra_engine._shell.local.executor_cache import cache_bin_dirs

    h = LocalHost()
    return hardware_from(
        snapshot(
            h,
            h,
            _executor_version,
            after_path=cache_bin_dirs(),
            executors=executors,
            devices=_executor_devices,
        )
    )


probe = boundary(host_hardware)
"""`host_hardware` as a Result: ``Success(Hardware)``, or ``Failure`` with its `EngineError`."""


def snapshot(
    files: HostFiles,
    proc: HostProcess,
    versions: Versions | None = None,
    *,
    after_path: tuple[str, ...] = (),
    executors: Executors = BUILTIN,
    devices: Devices | None = None,
) -> HostSnapshot:
    """Read every raw fact `hardware_from` needs; `versions` and `devices` ask each executor
    found, which is looked for on the search path, then in `after_path`."""
    cgroup = _cgroup_dir(files)
    return HostSnapshot(
        affinity_cpus=proc.affinity_cpus(),
        cgroup_cpu_max=files.read_text(f"{cgroup}/cpu.max") if cgroup else None,
        meminfo=files.read_text("/proc/meminfo"),
        cgroup_memory_max=files.read_text(f"{cgroup}/memory.max") if cgroup else None,
        cgroup_memory_current=files.read_text(f"{cgroup}/memory.current") if cgroup else None,
        cgroup_memory_stat=files.read_text(f"{cgroup}/memory.stat") if cgroup else None,
        drm=tuple(
            _drm_node(files, name)
            for name in files.list_dir(DRM) or ()
            if name.startswith("renderD")
        ),
        nvidia=tuple(
            NvidiaProcGpu(bus=bus, information=files.read_text(f"{NVIDIA_GPUS}/{bus}/information"))
            for bus in sorted(files.list_dir(NVIDIA_GPUS) or ())
        ),
        executors=tuple(
            e
            for p in executors
            if (e := _executor(files, proc, p, versions, after_path, devices=devices))
        ),
    )


def _cgroup_dir(files: HostFiles) -> str | None:
    text = files.read_text("/proc/self/cgroup") or ""
    for line in text.splitlines():
        if line.startswith("0::"):
            return posixpath.normpath("/sys/fs/cgroup/" + line[3:].strip().lstrip("/"))
    return None


def _drm_node(files: HostFiles, render: str) -> DrmNode:
    dev = f"{DRM}/{render}/device"
    device_drm = files.list_dir(f"{dev}/drm") or ()
    cards = tuple(e for e in device_drm if e.startswith("card"))
    tiles = tuple(t for t in files.list_dir(dev) or () if t.startswith("tile"))
    lmem = next(
        (v for c in cards if (v := files.read_text(f"{DRM}/{c}/lmem_total_bytes")) is not None),
        None,
    )
    return DrmNode(
        render=render,
        device_drm=device_drm,
        driver_link=files.read_link(f"{dev}/driver"),
        amdgpu_vram_total=files.read_text(f"{dev}/mem_info_vram_total"),
        amdgpu_vram_used=files.read_text(f"{dev}/mem_info_vram_used"),
        xe_tile_vram=tuple(
            v for t in tiles if (v := files.read_text(f"{dev}/{t}/physical_vram_size_bytes"))
        ),
        i915_lmem_total=lmem,
    )


def _executor(
    files: HostFiles,
    proc: HostProcess,
    profile: ExecutorProfile,
    versions: Versions | None,
    after_path: tuple[str, ...] = (),
    *,
    devices: Devices | None = None,
) -> ExecutorFile | None:
    name = profile.binary
    for d in (*proc.search_path(), *after_path):
        candidate = posixpath.join(d, name)
        if files.is_executable(candidate):
            real_dir = posixpath.dirname(files.real_path(candidate))
            libs: list[str] = []
            for rel in _LIB_DIRS:
                libs.extend(files.list_dir(posixpath.normpath(posixpath.join(real_dir, rel))) or ())
            version = versions(profile, candidate) if versions else ""
            listed, chosen_by = devices(profile, candidate) if devices else (None, ())
            return ExecutorFile(
                kind=profile.kind,
                path=candidate,
                libs=tuple(sorted(set(libs))),
                version=version,
                devices=listed,
                devices_env=chosen_by,
            )
    return None


def _executor_devices(
    profile: ExecutorProfile, path: str
) -> tuple[tuple[Device, ...] | None, tuple[tuple[str, str], ...]]:
    import os

    from exedra_engine._shell.local.device_list import device_env, executor_devices

    listed = executor_devices(profile, path)
    return listed, device_env(profile, os.environ) if listed is not None else ()


def _executor_version(profile: ExecutorProfile, path: str) -> str:
    # The flag-table cache (and its help-text parser) loads only when this machine is probed.
    from exedra_engine._shell.local.flag_tables import executor_version

    return executor_version(profile, path)
