"""The host snapshot, and its pure translation into `Hardware`.

A `HostSnapshot` holds the raw facts (file contents and listings) that probing reads; the
translation below interprets them without touching the host, so every driver's sysfs layout
is tested on data. What each driver exposes:

- amdgpu: ``device/mem_info_vram_total``, bytes (for APUs, the carve-out), and
  ``device/mem_info_vram_used``: free VRAM is their difference.
- xe: ``device/tile<N>/physical_vram_size_bytes`` per tile, summed; integrated parts have none.
- i915: mainline exposes no total; Intel's out-of-tree i915 adds ``card<N>/lmem_total_bytes``.
- nvidia, and anything else: no VRAM file, so 0 ("unknown"), never a guess.

An NVIDIA card shows no DRM node at all where ``nvidia-drm`` is not loaded (common on
servers) or where the sandbox hides ``/sys/class/drm`` (seen on a gVisor VM with an H200): its
driver still lists it under ``/proc/driver/nvidia/gpus/<bus>/information``. When no DRM node
is the nvidia driver's, each card listed there is a GPU named for its device node
(``nvidia0``), its VRAM unknown; with one, DRM is trusted and the list is not read twice.

Free VRAM is known only where the driver says how much is used (amdgpu); elsewhere it is None
("unknown"), never the total: a fit judged against total memory is wrong on any card that
already holds something. Free host memory is ``MemAvailable`` bounded by the cgroup v2 limit
less what the cgroup already holds (its usage less the reclaimable inactive file cache, the
kubelet's "working set").
"""

from __future__ import annotations

import math
import re

from exedra_engine._core.executors.kinds import KindName
from exedra_engine._core.host.devices import Device
from exedra_engine._core.host.machine import CPU, GPU, ExecutorInfo, Hardware
from exedra_engine._core.struct import Value


class DrmNode(Value, frozen=True, kw_only=True):
    """What sysfs says about one render node (``/sys/class/drm/renderD*``)."""

    render: str
    """The render node's name, e.g. ``renderD128``."""
    device_drm: tuple[str, ...] = ()
    """Entries of ``device/drm/``: the card (``card0``) and render nodes of the same device."""
    driver_link: str | None = None
    """Target of the ``device/driver`` link."""
    amdgpu_vram_total: str | None = None
    amdgpu_vram_used: str | None = None
    xe_tile_vram: tuple[str, ...] = ()
    i915_lmem_total: str | None = None


class NvidiaProcGpu(Value, frozen=True, kw_only=True):
    """One card the nvidia driver lists (``/proc/driver/nvidia/gpus/<bus>/``)."""

    bus: str
    """The entry's name, the card's PCI address, e.g. ``0000:00:06.0``."""
    information: str | None = None
    """The text of its ``information`` file (model, minor number...)."""


class ExecutorFile(Value, frozen=True, kw_only=True):
    """One executor binary found on PATH and the library files beside it."""

    kind: KindName
    path: str
    libs: tuple[str, ...] = ()
    """File names in the binary's directory and its lib directories."""
    version: str = ""
    """What its ``--version`` says, as `exedra_engine._core.executors.helptext.version_from`
    reads it."""
    devices: tuple[Device, ...] | None = None
    """What its ``--list-devices`` says (`exedra_engine._core.host.devices`); None when it
    was not asked or gave no answer to believe."""
    devices_env: tuple[tuple[str, str], ...] = ()
    """The variables that choose its devices, as they were when it was asked."""


class HostSnapshot(Value, frozen=True, kw_only=True):
    """Raw host facts, as read; `hardware_from` interprets them."""

    affinity_cpus: int
    cgroup_cpu_max: str | None = None
    meminfo: str | None = None
    cgroup_memory_max: str | None = None
    cgroup_memory_current: str | None = None
    cgroup_memory_stat: str | None = None
    drm: tuple[DrmNode, ...] = ()
    nvidia: tuple[NvidiaProcGpu, ...] = ()
    executors: tuple[ExecutorFile, ...] = ()


def hardware_from(snap: HostSnapshot) -> Hardware:
    """Interpret a snapshot. Total: missing or garbled files read as "unknown"."""
    return Hardware(
        cpu=CPU(
            threads=cpu_threads(snap.affinity_cpus, snap.cgroup_cpu_max),
            ram=ram_bytes(snap.meminfo, snap.cgroup_memory_max),
            available=available_bytes(
                snap.meminfo,
                snap.cgroup_memory_max,
                snap.cgroup_memory_current,
                snap.cgroup_memory_stat,
            ),
        ),
        gpus=gpus_from(snap.drm, snap.nvidia),
        executors=tuple(
            ExecutorInfo(
                kind=e.kind,
                path=e.path,
                backends=backends_of(e.libs),
                version=e.version,
                devices=e.devices or (),
                devices_listed=e.devices is not None,
                devices_env=e.devices_env,
            )
            for e in snap.executors
        ),
    )


def cpu_threads(affinity: int, cpu_max: str | None) -> int:
    """Threads this process may use: its affinity mask, capped by a cgroup v2 CPU quota."""
    threads = max(affinity, 1)
    if cpu_max:
        parts = cpu_max.split()
        if len(parts) == 2 and parts[0] != "max":
            try:
                quota, period = int(parts[0]), int(parts[1])
            except ValueError:
                return threads
            if quota > 0 and period > 0:
                threads = min(threads, max(1, math.ceil(quota / period)))
    return threads


_MEMTOTAL = re.compile(r"^MemTotal:\s+(\d+)\s*kB", re.MULTILINE)


def ram_bytes(meminfo: str | None, memory_max: str | None) -> int:
    """MemTotal in bytes, capped by a cgroup v2 memory limit; 0 if unknown."""
    total = 0
    if meminfo and (m := _MEMTOTAL.search(meminfo)):
        total = int(m.group(1)) * 1024
    limit = _int_or_none(memory_max)
    if limit is not None and limit > 0:
        total = min(total, limit) if total else limit
    return total


_MEMAVAILABLE = re.compile(r"^MemAvailable:\s+(\d+)\s*kB", re.MULTILINE)
_INACTIVE_FILE = re.compile(r"^inactive_file\s+(\d+)\s*$", re.MULTILINE)


def available_bytes(
    meminfo: str | None,
    memory_max: str | None,
    memory_current: str | None = None,
    memory_stat: str | None = None,
) -> int | None:
    """Bytes this process could still use: ``MemAvailable``, bounded by its cgroup v2
    limit less the cgroup's working set (usage less inactive file cache, which the kernel
    reclaims before it kills); None when neither says."""
    host = None
    if meminfo and (m := _MEMAVAILABLE.search(meminfo)):
        host = int(m.group(1)) * 1024
    limit = _int_or_none(memory_max)
    used = _int_or_none(memory_current)
    if limit is None or limit <= 0 or used is None:
        return host
    if memory_stat and (m := _INACTIVE_FILE.search(memory_stat)):
        used = max(0, used - int(m.group(1)))
    room = max(0, limit - used)
    return room if host is None else min(host, room)


def gpus_from(drm: tuple[DrmNode, ...], nvidia: tuple[NvidiaProcGpu, ...] = ()) -> tuple[GPU, ...]:
    """The GPUs of the DRM render nodes, and the nvidia driver's cards when no node is its."""
    gpus = tuple(gpu_from(n) for n in sorted(drm, key=lambda n: _natural(n.render)))
    if any(g.driver == "nvidia" for g in gpus):
        return gpus
    cards = sorted((nvidia_gpu(n) for n in nvidia), key=lambda g: _natural(g.card))
    return (*gpus, *cards)


_MINOR = re.compile(r"^Device Minor:\s*(\d+)\s*$", re.MULTILINE)


def nvidia_gpu(entry: NvidiaProcGpu) -> GPU:
    """One `GPU` from the nvidia driver's own list: named for its device node (``nvidia0``,
    what a container is handed), or for its bus address when the minor is not stated."""
    m = _MINOR.search(entry.information or "")
    return GPU(card=f"nvidia{m.group(1)}" if m else entry.bus, driver="nvidia", vram=0)


def gpu_from(node: DrmNode) -> GPU:
    """One `GPU` from one render node."""
    cards = sorted((e for e in node.device_drm if re.fullmatch(r"card\d+", e)), key=_natural)
    driver = node.driver_link.rstrip("/").rsplit("/", 1)[-1] if node.driver_link else ""
    return GPU(
        card=cards[0] if cards else node.render,
        driver=driver,
        vram=_vram(driver, node),
        vram_free=_vram_free(driver, node),
    )


def _vram(driver: str, node: DrmNode) -> int:
    if driver == "amdgpu":
        return _int_or_none(node.amdgpu_vram_total) or 0
    if driver == "xe":
        return sum(_int_or_none(t) or 0 for t in node.xe_tile_vram)
    if driver == "i915":
        return _int_or_none(node.i915_lmem_total) or 0
    return 0


def _vram_free(driver: str, node: DrmNode) -> int | None:
    if driver != "amdgpu":
        return None  # no used-memory file: unknown, never the total
    total = _int_or_none(node.amdgpu_vram_total)
    used = _int_or_none(node.amdgpu_vram_used)
    if total is None or used is None or total <= 0 or used < 0:
        return None
    return max(0, total - used)


_BACKEND = re.compile(r"^libggml-([a-z0-9]+)(?:-[\w.+-]*)?\.so(?:\.[\d.]+)?$")


def backends_of(libs: tuple[str, ...]) -> tuple[str, ...]:
    """Short GGML backend names of plugin libraries: ``libggml-cuda.so`` -> ``cuda``,
    ``libggml-cpu-haswell.so`` -> ``cpu``. The core libraries (libggml, libggml-base) are not
    backends."""
    found = {m.group(1) for name in libs if (m := _BACKEND.match(name))}
    found.discard("base")
    return tuple(sorted(found))


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _natural(name: str) -> tuple[str, int]:
    m = re.fullmatch(r"(\D*)(\d+)", name)
    return (m.group(1), int(m.group(2))) if m else (name, -1)
