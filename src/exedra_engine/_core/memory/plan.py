"""What a plan expects the executor to use, as values (the arithmetic is in `memory`).

Two figures stand side by side for every place (the host, each device), because each consumer
needs a different one: **reserved** is what the engine allocates or commits (exact for device
memory: a GPU fit is judged by it); **total** is the expected resident peak (what a cgroup
counts: memory limits are sized from it plus a stated margin). Sizes are bytes.
"""

from __future__ import annotations

from typing import Literal

from exedra_engine._core.struct import Value


class MemoryParts(Value, frozen=True, kw_only=True):
    """What one figure is made of, in bytes."""

    weights: int = 0
    kv: int = 0
    """KV cache (and recurrent state) at the planned context and slots."""
    compute: int = 0
    prompt_cache: int = 0
    """llama-server's host prompt cache (``--cache-ram``); host only."""
    other: int = 0
    """Fixed overhead: the process, its libraries, buffers not named above."""

    @property
    def total(self) -> int:
        """The sum of the parts."""
        return self.weights + self.kv + self.compute + self.prompt_cache + self.other


class PlaceMemory(Value, frozen=True, kw_only=True):
    """The memory one place (``Host`` or a device such as ``CUDA0``) is expected to hold."""

    name: str
    total: int
    """The expected resident peak, bytes (for a device: what it commits, = reserved)."""
    parts: MemoryParts
    """What makes up `total`."""
    reserved: int
    """What the engine reserves (allocates), bytes: the figure a device fit is judged by."""
    reserved_parts: MemoryParts
    available: int | None = None
    """The usable memory it was judged against (free, cgroup limit); None when unknown."""


class MemoryPlan(Value, frozen=True, kw_only=True):
    """The plan's memory: which source its figures come from, and for which context."""

    source: Literal["measured", "estimated"]
    ctx: int
    """The context (tokens, all slots) the figures are for."""
    host: PlaceMemory
    devices: tuple[PlaceMemory, ...] = ()
