"""Where llama.cpp places a model's weights: each block and the output layer on the host or a
device (src/llama-model.cpp, load_tensors), and the bytes that land on each place. Pure."""

from __future__ import annotations

import re
from typing import NamedTuple

from exedra_engine._core.gguf.inventory import ModelInventory, TensorInfo
from exedra_engine._core.host.machine import Hardware
from exedra_engine._core.memory.settings import MemorySettings
from exedra_engine._core.struct import Value

_EXPERTS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch)?exps")


class Placement(Value, frozen=True, kw_only=True):
    """Where each block and the output layer live: -1 the host, i the i-th device."""

    devices: tuple[str, ...]
    layers: tuple[int, ...]
    output: int
    kv_on_device: bool


def device_names(hw: Hardware, kind: str) -> tuple[str, ...]:
    """The backend device names the `kind` executor places layers on (``Vulkan0``...): its
    own device list where it was asked, else the host's GPUs under its backend's names
    (`Hardware.offload_devices`); none when it has no device."""
    return tuple(d.name for d in hw.offload_devices(kind))


def place(inv: ModelInventory, s: MemorySettings, hw: Hardware, kind: str) -> Placement:
    """llama.cpp's layer placement for the settings (src/llama-model.cpp, load_tensors): the
    output layer and the last ``-ngl`` - 1 blocks on the devices, split by ``-ts`` (default:
    by free memory), the input layer always on the host; ``-ngl`` unset counts as every
    layer offloaded (the executor's fitter moves layers back only when they do not fit)."""
    offload = hw.offload_devices(kind)
    devices = tuple(d.name for d in offload)
    if not devices or s.gpu_layers == 0:
        return Placement(devices=devices, layers=(-1,) * inv.blocks, output=-1, kv_on_device=False)
    n_gpu = inv.blocks + 1 if s.gpu_layers < 0 else min(s.gpu_layers, inv.blocks + 1)
    weights = s.tensor_split[: len(devices)] or tuple(
        float(d.available or 0) or 1.0 for d in offload
    )
    if s.split_mode == "none" or len(weights) == 1:
        weights = (1.0,) + (0.0,) * (len(devices) - 1)
    total = sum(weights) or 1.0
    bounds, acc = [], 0.0
    for w in weights:
        acc += w / total
        bounds.append(acc)
    first = inv.blocks + 1 - n_gpu  # blocks below it (and the input layer) stay on the host

    def device_of(i: int) -> int:
        # llama.cpp spreads the offloaded layers (blocks and the output) by cumulative split
        frac = (i - first) / max(n_gpu, 1)
        return next((d for d, b in enumerate(bounds) if frac < b), len(bounds) - 1)

    layers = tuple(device_of(i) if i >= first else -1 for i in range(inv.blocks))
    output = device_of(inv.blocks)  # the output layer is the first offloaded (n_gpu >= 1)
    return Placement(devices=devices, layers=layers, output=output, kv_on_device=s.kv_offload)


def weights_by_place(
    inv: ModelInventory, s: MemorySettings, p: Placement, by_layer: ByLayer | None = None
) -> tuple[int, tuple[int, ...]]:
    """Bytes of weights on the host and on each device. `by_layer`: `bytes_by_layer(inv)`,
    where the caller has it (an estimate's caller estimates more than once)."""
    if not p.devices:  # every tensor on the host (a CPU-only plan)
        return inv.tensor_bytes, ()
    dev = [0] * len(p.devices)
    overrides = [(_compile(pat), buft) for pat, buft in s.override_tensor]
    if overrides or s.cpu_moe or s.n_cpu_moe > 0:
        host = 0
        for t in inv.tensors:
            where = _tensor_place(t, inv, s, p, overrides)
            if where < 0:
                host += t.size
            else:
                dev[where] += t.size
        return host, tuple(dev)
    # By layer alone: `_tensor_place` without overrides or experts kept on the host.
    b = by_layer or bytes_by_layer(inv)
    host = b.host
    for where, size in ((p.output, b.output), *zip(p.layers, b.blocks, strict=True)):
        if where < 0:
            host += size
        else:
            dev[where] += size
    return host, tuple(dev)


class ByLayer(NamedTuple):
    """A model's weights by the layer that holds them."""

    blocks: tuple[int, ...]
    """Bytes of each block's tensors."""
    output: int
    """Bytes of the output layer's."""
    host: int
    """Bytes of the rest (the input layer), which stay on the host."""


def bytes_by_layer(inv: ModelInventory) -> ByLayer:
    """`ByLayer` of `inv`: one pass over its tensors."""
    n = inv.blocks
    blocks = [0] * n
    output = host = 0
    for name, size in [(t.name, t.size) for t in inv.tensors]:
        # `TensorInfo.layer`, inline: a call per tensor costs as much as the rest.
        head = name[4:].partition(".")[0] if name.startswith("blk.") else ""
        if head.isdigit():
            il = int(head)
            if il < n:
                blocks[il] += size
            else:
                host += size
        elif name.startswith(_OUTPUT):
            output += size
        else:
            host += size
    return ByLayer(tuple(blocks), output, host)


_OUTPUT = ("output.", "output_norm.")
"""The output layer's tensors, placed with it."""


def _compile(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None  # the executor refuses it at start; the estimate ignores it


def _tensor_place(
    t: TensorInfo,
    inv: ModelInventory,
    s: MemorySettings,
    p: Placement,
    overrides: list[tuple[re.Pattern[str] | None, str]],
) -> int:
    for rx, buft in overrides:
        if rx is not None and rx.search(t.name):
            return _buffer_place(buft, p)
    layer = t.layer
    if layer is not None and _EXPERTS.search(t.name) and (s.cpu_moe or layer < s.n_cpu_moe):
        return -1
    if layer is not None:
        return p.layers[layer] if layer < len(p.layers) else -1
    if t.name.startswith(_OUTPUT):
        return p.output
    return -1  # token_embd and the rest of the input layer stay on the host


def _buffer_place(buft: str, p: Placement) -> int:
    name = buft.strip()
    if name.upper().startswith("CPU"):
        return -1
    for i, d in enumerate(p.devices):
        if name.lower() == d.lower() or name.lower().startswith(d.lower()):
            return i
    return -1
