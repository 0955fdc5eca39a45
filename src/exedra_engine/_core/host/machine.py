"""What a host is, as values: its processor, render devices, installed executors, and what
llama-fit-params measured on it. The snapshot the planner reads (`Hardware`), built from sysfs
by `exedra_engine._core.host.hardware` or read back from a hardware file.
"""

from __future__ import annotations

from typing import Final

from exedra_engine._core.executors.flags import Row
from exedra_engine._core.executors.kinds import KindName
from exedra_engine._core.host.devices import Device, offloads
from exedra_engine._core.struct import Value, freeze


class FitRow(Value, frozen=True, kw_only=True):
    """One device's (or the host's) reservation, as llama-fit-params prints it."""

    name: str
    """The backend device name (``CUDA0``, ``Vulkan0``) or ``Host``."""
    model: int
    """Bytes reserved for weights."""
    context: int
    """Bytes reserved for the KV cache (and recurrent state)."""
    compute: int
    """Bytes reserved for compute buffers."""
    free: int = 0
    """Bytes free on the device (for ``Host``: usable by the process) when measured, as the
    engine reported it (devices) or the probe found it (the host); 0 when not known."""

    @property
    def total(self) -> int:
        """model + context + compute."""
        return self.model + self.context + self.compute


class FitMeasurement(Value, frozen=True, kw_only=True, omit_defaults=True):
    """One run of llama-fit-params: the model, the flags it was given, and its answer."""

    model: str
    """The model path it loaded (the first shard of a split set)."""
    settings: tuple[str, ...] = ()
    """The plan's memory flags (`memory_settings`): what a plan is matched by."""
    args: tuple[str, ...] = ()
    """What it was run with: the `settings` it takes (see `companion_args`). Those it does
    not take (``--cache-ram``, ``--mmproj``...) reserve memory these figures leave out."""
    ctx: int
    """The context the figures are for."""
    host: FitRow
    devices: tuple[FitRow, ...] = ()
    build: str = ""
    """The binary's stated version, so a stale measurement can be told apart."""


class CPU(Value, frozen=True, kw_only=True):
    """The host processor and memory."""

    threads: int
    """CPU threads this process may run on (affinity and cgroup quota applied)."""
    ram: int = 0
    """Bytes of memory available to this process's cgroup or the host; 0 if unknown."""
    available: int | None = None
    """Bytes usable now (MemAvailable, bounded by the cgroup's limit less its usage); None
    when unknown (a hardware file from an older probe)."""


class GPU(Value, frozen=True, kw_only=True):
    """One GPU as the host's kernel shows it: a DRM render device, or a card the nvidia
    driver lists where it has no DRM node. What the executor itself sees may differ (a
    Vulkan or CUDA device with no DRM node: WSL2, a container without sysfs, a software
    renderer): that is `ExecutorInfo.devices`."""

    card: str
    """The DRM card name (``card0``), or the render node name when no card is linked."""
    driver: str
    """Kernel driver bound to the device (``amdgpu``, ``i915``, ``xe``, ``nvidia``, ...)."""
    vram: int = 0
    """Dedicated video memory in bytes; 0 when the driver does not expose it."""
    vram_free: int | None = None
    """Free video memory in bytes when probed (amdgpu: total less ``mem_info_vram_used``);
    None when the driver does not expose it."""


class ExecutorInfo(Value, frozen=True, kw_only=True, omit_defaults=True):
    """One installed executor binary and the GGML backends it can load."""

    kind: KindName
    path: str
    backends: tuple[str, ...] = ()
    """Short backend names (``cpu``, ``vulkan``, ``cuda``, ...), sorted."""
    version: str = ""
    """The version the binary states (``0.5.0-dev (build 1, commit 0c1e570)``); "" when it
    states none (whisper-server has no ``--version``) or it was not asked."""
    flags: tuple[Row, ...] = ()
    """The flags its own ``--help`` lists, parsed (``probe --json --flags`` records them):
    a plan made elsewhere from this host's file judges its layers by them, since a dry run
    never runs a binary a hardware file names. () when not recorded."""
    devices: tuple[Device, ...] = ()
    """The devices the binary itself lists (``llama-server --list-devices``, under the
    environment it was probed or planned in), the CPU aside; () when it lists none or was
    not asked (`devices_listed` tells which)."""
    devices_listed: bool = False
    """Whether `devices` is the binary's answer (then () means it sees no device, whatever
    sysfs shows); False when it was not asked (whisper-server, which has no device list; a
    hardware file from an older probe; a listing that failed). A non-empty `devices` counts
    as listed either way."""

    devices_env: tuple[tuple[str, str], ...] = ()
    """The variables that choose its devices (the profile's `device_env`:
    ``GGML_VK_VISIBLE_DEVICES``...) as they were when `devices` was listed: the executor sees
    those devices when it runs with the same values."""

    def listed(self) -> bool:
        """Whether the binary's own device list is known (see `devices_listed`)."""
        return self.devices_listed or bool(self.devices)

    def has_gpu_backend(self) -> bool:
        """Whether any known backend drives a GPU (not cpu, blas or rpc)."""
        return not _NON_GPU_BACKENDS.issuperset(self.backends)


_NON_GPU_BACKENDS = frozenset({"cpu", "blas", "rpc", "amx"})


class Hardware(Value, frozen=True, kw_only=True):
    """A host snapshot used for planning."""

    cpu: CPU
    gpus: tuple[GPU, ...] = ()
    executors: tuple[ExecutorInfo, ...] = ()
    measurements: tuple[FitMeasurement, ...] = ()
    """What llama-fit-params measured on this host (``probe --measure``), so a plan made
    elsewhere from this host's file uses the target's own figures."""

    def executor(self, kind: str) -> ExecutorInfo | None:
        """The installed binary for `kind`, or None."""
        # (A loop, not next() of a generator: asked twice on every plan.)
        for e in self.executors:
            if e.kind == kind:
                return e
        return None

    def has_gpu(self) -> bool:
        """Whether the kernel shows any GPU (`gpus`: DRM render devices, or the nvidia
        driver's cards). Not whether a plan offloads: that is `offload_devices`, which asks
        the executor's own device list first."""
        return bool(self.gpus)

    def offload_devices(self, kind: str) -> tuple[OffloadDevice, ...]:
        """The devices the `kind` executor would place layers on, in its order: those it
        listed itself (`ExecutorInfo.devices`, its accelerators aside) when it was asked;
        otherwise one per GPU of `gpus`, named as its first GPU backend names them, when it
        has one. () when it is not installed or has none."""
        exe = self.executor(kind)
        if exe is None:
            return ()
        if exe.listed():
            return tuple(
                OffloadDevice(
                    name=d.name, label=d.description, total=d.total, free=d.free, listed=True
                )
                for d in exe.devices
                if offloads(d)
            )
        if not self.gpus or not exe.has_gpu_backend():
            return ()
        backend = next((b for b in exe.backends if b in _GPU_BACKENDS), "")
        prefix = _GPU_BACKENDS.get(backend, backend.upper() or "GPU")
        return tuple(
            OffloadDevice(name=f"{prefix}{i}", label=g.card, total=g.vram, free=g.vram_free)
            for i, g in enumerate(self.gpus)
        )


class OffloadDevice(Value, frozen=True, kw_only=True):
    """One place a plan puts layers on (`Hardware.offload_devices`), from the executor's own
    device list or, where it was not asked, from the kernel's GPUs."""

    name: str
    """The backend device name (``Vulkan0``, ``CUDA0``)."""
    label: str
    """The executor's description of it, or the GPU's DRM card (``card0``)."""
    total: int
    """Bytes of its memory; 0 when unknown (nvidia's sysfs says none)."""
    free: int | None
    """Bytes free; None when unknown."""
    listed: bool = False
    """Whether the executor listed it (else it is a `GPU` of sysfs)."""

    @property
    def available(self) -> int | None:
        """What a plan is judged against: its free memory, else its total; None when
        neither is known."""
        return self.free if self.free is not None else self.total or None


_GPU_BACKENDS: Final = freeze(
    {
        "cuda": "CUDA",
        "hip": "ROCm",
        "vulkan": "Vulkan",
        "sycl": "SYCL",
        "metal": "MTL",
        "musa": "MUSA",
        "opencl": "OpenCL",
        "cann": "CANN",
    }
)
"""The device-name prefix each GPU backend's devices get in llama.cpp (``Vulkan0``)."""
