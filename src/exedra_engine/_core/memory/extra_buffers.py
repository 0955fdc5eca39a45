"""The weights a build copies into extra host buffers, counted from the executor's own words.

llama.cpp's CPU backend may keep a second, converted copy of some weights beside the mapped
file: the AMX buffer on Xeon 4th generation and later (Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K,
IQ4_XS; ggml-cpu/amx/common.h ``qtype_has_amx_kernels``), the repacked Q4_0/IQ4_NL/Q4_K layouts
(``CPU_REPACK``) on AVX2 and ARM, KleidiAI's on ARM. Which copies a load makes depends on the
build (its CPU variant, its backends) and the model's tensor types, so the figures are read
from one real load: its ``load_tensors: NAME model buffer size = X MiB`` lines
(`buffers_from_log`). Every host buffer that is not the file mapping (``CPU_Mapped``), the
plain ``CPU`` buffer or a device's is such a copy; the estimate holds the file's weights
already, the copies come on top (`with_extra_buffers`). Pure.
"""

from __future__ import annotations

import re
from typing import Final

from msgspec.structs import replace

from exedra_engine._core.memory.plan import MemoryPlan, PlaceMemory
from exedra_engine._core.memory.settings import MIB
from exedra_engine._core.struct import Value

_BUFFER: Final = re.compile(
    r"load_tensors:[ \t]+([A-Za-z][A-Za-z0-9_]{0,31}) model buffer size =[ \t]+"
    r"([0-9]{1,9}(?:\.[0-9]{1,3})?) MiB",
    re.A,
)
_NOT_EXTRA: Final = frozenset({"CPU", "CPU_Mapped"})
"""The buffers that hold the file's own weights on the host, which the estimate counts."""
_DEVICE: Final = re.compile(r"[A-Za-z_]+[0-9]{1,3}|[A-Za-z]+_Host", re.A)
"""A device's buffer (``Vulkan0``, ``CUDA1``) or its pinned host buffer (``CUDA_Host``)."""
MAX_BUFFERS: Final = 64


class WeightBuffers(Value, frozen=True, kw_only=True):
    """What one load of a model by one binary put in each weight buffer, and where that was
    read: the figures a plan's extra host term comes from."""

    buffers: tuple[tuple[str, int], ...]
    """(buffer name, bytes) as the load log names them, in its order."""
    source: str
    """Where the figures come from (the binary and the model), for the plan's notes."""

    @property
    def extra(self) -> tuple[tuple[str, int], ...]:
        """The host buffers that copy weights beside the file's (AMX, CPU_REPACK...)."""
        return tuple(
            (n, b) for n, b in self.buffers if n not in _NOT_EXTRA and not _DEVICE.fullmatch(n)
        )

    @property
    def extra_bytes(self) -> int:
        """The host bytes those copies hold."""
        return sum(b for _, b in self.extra)


def buffers_from_log(log: str) -> tuple[tuple[str, int], ...]:
    """The weight buffers of the last load in an executor's log: llama-server's fitter may
    first load without allocating (every buffer 0 MiB), then the real load prints them again.
    Sizes are rounded to whole bytes from the log's MiB with two decimals. Empty when the log
    names none."""
    loads: list[list[tuple[str, int]]] = []
    for m in _BUFFER.finditer(log):
        name, size = m.group(1), round(float(m.group(2)) * MIB)
        if not loads or any(n == name for n, _ in loads[-1]):
            loads.append([])  # a name seen again starts the next load
        if len(loads[-1]) < MAX_BUFFERS:
            loads[-1].append((name, size))
    real = [load for load in loads if any(b for _, b in load)]
    return tuple(real[-1]) if real else ()


def with_extra_buffers(memory: MemoryPlan, found: WeightBuffers) -> tuple[MemoryPlan, str]:
    """The plan's memory with the build's extra host copies of the weights added to the
    host's weights (reserved and resident: the copies are allocated and filled at load), and
    the note saying which figures were used and where they came from."""
    extra = found.extra_bytes
    if not extra:
        return memory, f"no extra weight buffers on the host ({found.source})"
    host = memory.host
    res = replace(host.reserved_parts, weights=host.reserved_parts.weights + extra)
    rsd = replace(host.parts, weights=host.parts.weights + extra)
    new_host: PlaceMemory = replace(
        host, total=rsd.total, parts=rsd, reserved=res.total, reserved_parts=res
    )
    what = " + ".join(f"{n} {b / MIB:.0f} MiB" for n, b in found.extra)
    note = f"host weights + {what}: copies of the weights this build makes ({found.source})"
    return replace(memory, host=new_host), note
