"""What a host is, as values: its processor, render devices, installed executors, and what
llama-fit-params measured on it. The snapshot the planner reads (`Hardware`), built from sysfs
by `exedra_engine._core.host.hardware` or read back from a hardware file.
"""

from __future__ import annotations

from exedra_engine._core.executors.flags import Row
from exedra_engine._core.executors.kinds import KindName
from exedra_engine._core.struct import Value


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
    """One DRM render device."""

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

    def has_gpu_backend(self) -> bool:
        """Whether any known backend drives a GPU (not cpu, blas or rpc)."""
        return any(b not in _NON_GPU_BACKENDS for b in self.backends)


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
        return next((e for e in self.executors if e.kind == kind), None)

    def has_gpu(self) -> bool:
        """Whether any render device was found."""
        return bool(self.gpus)
