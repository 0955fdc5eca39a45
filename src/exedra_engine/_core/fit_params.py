"""The engine's own memory measurement, as a value: what ``llama-fit-params --fit-print on``
said it would reserve for a model and a set of flags. Pure: the shell runs the binary
(`exedra_engine._shell.measure`), this module holds what it found.

The figures are what llama.cpp **reserves** (exact for device memory, an upper bound for the
host's resident peak: see docs/explanation.md), in bytes.
"""

from __future__ import annotations

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
    """Bytes free on the device when measured; 0 when not stated (the host row)."""

    @property
    def total(self) -> int:
        """model + context + compute."""
        return self.model + self.context + self.compute


class FitMeasurement(Value, frozen=True, kw_only=True, omit_defaults=True):
    """One run of llama-fit-params: the model, the flags it was given, and its answer."""

    model: str
    """The model path it loaded (the first shard of a split set)."""
    args: tuple[str, ...] = ()
    """The memory-relevant flags it was run with (the plan's own), in order."""
    ctx: int
    """The context the figures are for."""
    host: FitRow
    devices: tuple[FitRow, ...] = ()
    build: str = ""
    """The binary's stated version, so a stale measurement can be told apart."""
