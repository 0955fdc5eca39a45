"""How much memory a llama.cpp executor will use for a plan: a pure estimate.

From the model's inventory (`exedra_engine._core.gguf.inventory`), the planned argv (read through
the profile's flag table and its `memory_flags`) and the host snapshot, `estimate_memory`
computes for the host and each device the weights, the KV cache (and recurrent state), the
compute buffers and the host prompt cache, twice: what llama.cpp **reserves** (what it
allocates; a device fit is judged by it) and the expected **resident** peak (what a cgroup
counts). The arithmetic mirrors llama.cpp's (src/llama-context.cpp, llama-kv-cache*.cpp,
tools/server); the constants it cannot derive are calibrated against measurements
(docs/explanation.md, "Memory") and named here.

Deterministic; no I/O. A measurement by the engine itself (`FitMeasurement`) replaces the
reserved figures when one matches (`plan_memory`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple, TypeVar

from msgspec.structs import replace

from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.gguf.inventory import CACHE_TYPES, ModelInventory, TensorInfo
from exedra_engine._core.memory.fit_params import FitMeasurement, FitRow, measurement_for
from exedra_engine._core.memory.plan import MemoryParts, MemoryPlan, PlaceMemory
from exedra_engine._core.struct import Value, freeze
from exedra_engine._core.values import GPU, Hardware
from exedra_engine.errors import DoesNotFit

MIB: Final = 1 << 20

ROLES: Final = (
    "ctx",
    "parallel",
    "kv_unified",
    "cache_type_k",
    "cache_type_v",
    "flash_attn",
    "batch",
    "ubatch",
    "gpu_layers",
    "tensor_split",
    "split_mode",
    "override_tensor",
    "cpu_moe",
    "n_cpu_moe",
    "mmproj",
    "draft",
    "cache_ram",
    "swa_full",
    "kv_offload",
    "embeddings",
)
"""What `ExecutorProfile.memory_flags` may name."""

# llama-server's defaults (common/common.h, tools/server/server.cpp).
DEFAULT_BATCH: Final = 2048
DEFAULT_UBATCH: Final = 512
DEFAULT_CACHE_RAM_MIB: Final = 8192
PROMPT_CACHE_STATES: Final = 4
"""How many planned KV caches the host prompt cache the planner sizes can hold: one per
default slot (``-np auto`` is 4)."""
PROMPT_CACHE_FLOOR_MIB: Final = 256
"""The smallest prompt cache the planner sizes, MiB."""
AUTO_PARALLEL: Final = 4
"""``-np`` unset (auto) means 4 slots sharing one unified KV cache."""
FALLBACK_CTX: Final = 4096
"""The context when neither the argv nor the model names one."""
CTX_PAD: Final = 256
"""llama.cpp pads the context (and each slot's, and the SWA cache) to whole 256 cells."""

# Calibrated constants (docs/explanation.md, "Memory": Gemma 3 270M and a 135M llama model
# measured with VmHWM and llama-fit-params on the project's build).
RESIDENT_BASE: Final = 32 * MIB
"""The process itself: libraries, the HTTP server, threads' stacks, the ggml contexts."""
RESIDENT_PER_TOKEN: Final = 400
"""Bytes per vocabulary token the process keeps resident: the tokenizer's tables, the
sampler's candidate arrays and the output buffers, one set per slot and per request."""
ACTIVATION_BYTES: Final = 2
"""The compute graph's live activations: bytes per element of the widest layer (feed-forward
or four embeddings) per ubatch token (half an f32 row: the allocator reuses the rest)."""

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
_T = TypeVar("_T")
_EXPERTS = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch)?exps")


class MemorySettings(Value, frozen=True, kw_only=True):
    """The memory-relevant settings of a plan's argv, with the executor's defaults filled in."""

    ctx: int = 0
    """``-c``; 0: the model's training context."""
    parallel: int = -1
    """``-np``; -1: auto (`AUTO_PARALLEL` slots, unified KV)."""
    kv_unified: bool = False
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: str = "auto"
    batch: int = DEFAULT_BATCH
    ubatch: int = DEFAULT_UBATCH
    gpu_layers: int = -1
    """-1: auto (the executor's fitter places them), a count otherwise (``all``: 999)."""
    tensor_split: tuple[float, ...] = ()
    split_mode: str = "layer"
    override_tensor: tuple[tuple[str, str], ...] = ()
    """``-ot`` (pattern, buffer type) pairs, in order."""
    cpu_moe: bool = False
    n_cpu_moe: int = 0
    mmproj: str = ""
    draft: str = ""
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB
    swa_full: bool = False
    kv_offload: bool = True
    embeddings: bool = False
    explicit: frozenset[str] = frozenset()
    """The roles the argv or env set."""


def read_settings(
    profile: ExecutorProfile,
    args: Sequence[str],
    env: Sequence[str] = (),
    *,
    items: Sequence[Item] | None = None,
) -> MemorySettings:
    """The memory settings of an argv (and ``NAME=VALUE`` env) through the profile's table;
    a flag in argv wins over its variable, as the executor reads them. `items` are `args`
    as the table reads them, where the caller has them already (the merge's)."""
    if items is None:
        items = profile.flags.split_items(args, "plan args")
    found = _Found(profile)
    found.read_items(items)
    found.read_env(env)
    return found.settings()


class _Found:
    """The memory roles an argv and env set: each one's values, whether it was negated, and
    every value of the repeatable ``-ot``."""

    def __init__(self, profile: ExecutorProfile) -> None:
        self.table = profile.flags
        self.role_of = {key: role for role, key in profile.memory_flags.items()}
        self.found: dict[str, tuple[str, ...]] = {}
        self.negated: dict[str, bool] = {}
        self.override_tensor: list[str] = []

    def read_items(self, items: Sequence[Item]) -> None:
        role_of = self.role_of
        for item in [it for it in items if it.key in role_of]:
            role = role_of[item.key or ""]
            self.found[role] = item.values
            self.negated[role] = item.negated
            if role == "override_tensor":
                self.override_tensor.extend(item.values)

    def read_env(self, env: Sequence[str]) -> None:
        for entry in env:
            name, _, value = entry.partition("=")
            flag = self.table.flag_for_env(name)
            role = self.role_of.get(flag.key) if flag is not None else None
            if flag is None or role is None or role in self.found:
                continue
            self.found[role] = (value,) if flag.nargs else ()
            self.negated[role] = not flag.nargs and _falsy(value)
            if role == "override_tensor":
                self.override_tensor.append(value)

    def val(self, role: str, default: str = "") -> str:
        v = self.found.get(role)
        return (v[0] if v else "") or default

    def num(self, role: str, default: int) -> int:
        v = self.found.get(role)
        return _int(v[0], default) if v else default

    def on(self, role: str, default: bool) -> bool:
        if role not in self.found:
            return default
        return not self.negated.get(role, False)

    def settings(self) -> MemorySettings:
        val, num, on = self.val, self.num, self.on
        return MemorySettings(
            ctx=num("ctx", 0),
            parallel=num("parallel", -1),
            kv_unified=on("kv_unified", False),
            cache_type_k=val("cache_type_k", "f16").lower(),
            cache_type_v=val("cache_type_v", "f16").lower(),
            flash_attn=val("flash_attn", "auto").lower(),
            batch=num("batch", DEFAULT_BATCH),
            ubatch=num("ubatch", DEFAULT_UBATCH),
            gpu_layers=_gpu_layers(val("gpu_layers") or None),
            tensor_split=_split(val("tensor_split") or None),
            split_mode=val("split_mode", "layer").lower(),
            override_tensor=_override_pairs(self.override_tensor),
            cpu_moe=on("cpu_moe", False),
            n_cpu_moe=num("n_cpu_moe", 0),
            mmproj=val("mmproj"),
            draft=val("draft"),
            cache_ram_mib=num("cache_ram", DEFAULT_CACHE_RAM_MIB),
            swa_full=on("swa_full", False),
            kv_offload=on("kv_offload", True),
            embeddings=on("embeddings", False),
            explicit=frozenset(self.found),
        )


def _override_pairs(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``-ot`` values as (pattern, buffer type) pairs, in order; malformed parts skipped."""
    out = []
    for value in values:
        for part in value.split(","):
            pattern, _, buft = part.partition("=")
            if pattern and buft:
                out.append((pattern, buft))
    return tuple(out)


def _falsy(v: str) -> bool:
    return v.strip().lower() in ("0", "false", "off", "no", "disabled")


def _int(v: str | None, default: int) -> int:
    if v is None:
        return default
    try:
        return int(v, 0)
    except ValueError:
        return default


def _gpu_layers(v: str | None) -> int:
    if v is None or v.lower() == "auto":
        return -1
    if v.lower() == "all":
        return 1 << 30
    n = _int(v, -1)
    return 1 << 30 if n <= -2 else n


def _split(v: str | None) -> tuple[float, ...]:
    if not v:
        return ()
    out = []
    for part in re.split(r"[,/]", v):
        try:
            out.append(max(float(part), 0.0))
        except ValueError:
            return ()
    return tuple(out) if sum(out) > 0 else ()


class Shape(Value, frozen=True, kw_only=True):
    """The context geometry llama.cpp derives from the settings (src/llama-context.cpp)."""

    ctx: int
    """Cells of the whole KV cache (all slots), padded."""
    ctx_seq: int
    """Cells one slot may use."""
    seqs: int
    streams: int
    """KV streams: 1 when unified, one per slot otherwise."""
    ubatch: int
    flash_attn: bool


def shape(inv: ModelInventory, s: MemorySettings, ctx: int | None = None) -> Shape:
    """The context geometry for `ctx` tokens (default: the settings', else the model's)."""
    n_ctx = ctx if ctx is not None else (s.ctx or inv.context or FALLBACK_CTX)
    seqs = AUTO_PARALLEL if s.parallel < 0 else max(s.parallel, 1)
    unified = True if s.parallel < 0 else s.kv_unified
    n_ctx = _pad(max(n_ctx, 1))
    if unified:
        ctx_seq, streams = n_ctx, 1
    else:
        ctx_seq, streams = _pad(n_ctx // seqs or 1), seqs
        n_ctx = ctx_seq * seqs
    batch = min(n_ctx, max(s.batch, 1))
    ubatch = min(batch, max(s.ubatch, 1))
    return Shape(
        ctx=n_ctx,
        ctx_seq=ctx_seq,
        seqs=seqs,
        streams=streams,
        ubatch=ubatch,
        flash_attn=s.flash_attn not in ("off", "disabled", "false", "0"),
    )


def _pad(n: int) -> int:
    return -(-n // CTX_PAD) * CTX_PAD


def _row(type_name: str, elements: int) -> int:
    blk, size = CACHE_TYPES.get(type_name, CACHE_TYPES["f16"])
    return -(-elements // blk) * size


def kv_bytes(inv: ModelInventory, s: MemorySettings, sh: Shape) -> tuple[int, ...]:
    """Bytes of each block's KV cache or recurrent state."""
    out = []
    n = inv.blocks
    swa_used = inv.sliding_window > 0 and any(inv.swa_layers)
    # Blocks alike (same heads, same window) cost alike: each kind is worked out once.
    alike: dict[tuple[int, int, bool], int] = {}
    per_block = zip(
        _padded(inv.recurrent_layers, n, False),
        _padded(inv.head_count_kv, n, 0),
        _padded(inv.head_count, n, 0),
        _padded(inv.swa_layers, n, False),
        strict=True,
    )
    for il, (recurrent, n_kv, heads, window) in enumerate(per_block):
        if recurrent:
            out.append(_recurrent_bytes(inv) * sh.seqs)
            continue
        key = (n_kv, heads, swa_used and window)
        b = alike.get(key)
        if b is None:
            b = alike[key] = _kv_block(inv, s, sh, il, key[2]) if n_kv else 0
        out.append(b)
    return tuple(out)


def _padded(values: tuple[_T, ...], n: int, fill: _T) -> tuple[_T, ...]:
    """`values` cut or filled out to `n` entries (a short per-layer tuple: `fill` beyond)."""
    return values[:n] + (fill,) * (n - len(values))


def _kv_block(inv: ModelInventory, s: MemorySettings, sh: Shape, il: int, swa: bool) -> int:
    """Bytes of the KV cache of block `il` (one with KV heads)."""
    n_kv = inv.head_count_kv[il]
    dk, dv = _head_dims(inv, il, swa)
    cells = sh.ctx_seq
    if swa and not s.swa_full:
        window = inv.sliding_window * (sh.seqs if sh.streams == 1 else 1)
        cells = _pad(min(sh.ctx_seq, window + sh.ubatch))
    k = _row(s.cache_type_k, dk * n_kv)
    v = 0 if inv.key_length_mla else _row(s.cache_type_v, dv * n_kv)
    return (k + v) * cells * sh.streams


def _head_dims(inv: ModelInventory, il: int, swa: bool) -> tuple[int, int]:
    heads = inv.head_count[il] if il < len(inv.head_count) and inv.head_count[il] else 1
    dk = (inv.key_length_swa if swa else 0) or inv.key_length or inv.embedding // heads
    dv = (inv.value_length_swa if swa else 0) or inv.value_length or inv.embedding // heads
    return dk, dv


def _recurrent_bytes(inv: ModelInventory) -> int:
    """One sequence's recurrent state of one layer, f32 (llama_hparams::n_embd_r/n_embd_s)."""
    if inv.wkv_head_size:
        r = (inv.token_shift_count or 2) * inv.embedding
        st = inv.embedding * inv.wkv_head_size
    elif inv.shortconv_l_cache:
        r = inv.embedding * (inv.shortconv_l_cache - 1)
        st = 0
    else:
        conv = max(inv.ssm_conv_kernel - 1, 0)
        r = conv * (inv.ssm_inner_size + 2 * inv.ssm_group_count * inv.ssm_state_size)
        st = inv.ssm_state_size * inv.ssm_inner_size
    return (r + st) * 4


class Placement(Value, frozen=True, kw_only=True):
    """Where each block and the output layer live: -1 the host, i the i-th device."""

    devices: tuple[str, ...]
    layers: tuple[int, ...]
    output: int
    kv_on_device: bool


def device_names(hw: Hardware, kind: str) -> tuple[str, ...]:
    """The backend device names the `kind` executor's llama.cpp would give the host's GPUs
    (``Vulkan0``...); none when its build has no GPU backend."""
    exe = hw.executor(kind)
    if exe is None or not exe.has_gpu_backend() or not hw.gpus:
        return ()
    backend = next((b for b in exe.backends if b in _GPU_BACKENDS), "")
    prefix = _GPU_BACKENDS.get(backend, backend.upper() or "GPU")
    return tuple(f"{prefix}{i}" for i in range(len(hw.gpus)))


def place(inv: ModelInventory, s: MemorySettings, hw: Hardware, kind: str) -> Placement:
    """llama.cpp's layer placement for the settings (src/llama-model.cpp, load_tensors): the
    output layer and the last ``-ngl`` - 1 blocks on the devices, split by ``-ts`` (default:
    by free memory), the input layer always on the host; ``-ngl`` unset counts as every
    layer offloaded (the executor's fitter moves layers back only when they do not fit)."""
    devices = device_names(hw, kind)
    if not devices or s.gpu_layers == 0:
        return Placement(devices=devices, layers=(-1,) * inv.blocks, output=-1, kv_on_device=False)
    n_gpu = inv.blocks + 1 if s.gpu_layers < 0 else min(s.gpu_layers, inv.blocks + 1)
    weights = s.tensor_split[: len(devices)] or tuple(
        float(_free(g)) or 1.0 for g in hw.gpus[: len(devices)]
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


def _free(g: GPU) -> int:
    return g.vram_free if g.vram_free is not None else g.vram


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


class Compute(Value, frozen=True, kw_only=True):
    """One compute buffer's parts, reserved, in bytes."""

    logits: int
    """``n_vocab x n_ubatch`` f32: llama.cpp reserves the graph for a full ubatch of outputs."""
    activations: int
    attention: int
    """The attention mask (f16 with flash attention, f32 without) and, without flash
    attention, the scores ``heads x cells x n_ubatch`` f32."""

    @property
    def reserved(self) -> int:
        """The buffer: the allocator reuses the attention's memory for the logits, which come
        after it (checked against llama-fit-params: the larger of the two, plus the
        activations)."""
        return max(self.logits, self.attention) + self.activations


def compute_bytes(inv: ModelInventory, sh: Shape, kv_cells: int) -> Compute:
    """The compute buffer llama.cpp reserves for the output place (with the logits)."""
    width = max((*inv.feed_forward, 4 * inv.embedding, 1))
    if sh.flash_attn:
        attention = kv_cells * sh.ubatch * 2
    else:
        heads = max((*inv.head_count, 1))
        attention = (heads + 1) * kv_cells * sh.ubatch * 4
    return Compute(
        logits=inv.vocab * sh.ubatch * 4,
        activations=ACTIVATION_BYTES * width * sh.ubatch,
        attention=attention,
    )


def prompt_cache_bytes(s: MemorySettings, kv_total: int) -> int:
    """The host prompt cache llama-server may fill (``--cache-ram`` MiB; -1: unlimited, then
    bounded only by its token limit, about one full KV cache)."""
    if s.cache_ram_mib < 0:
        return kv_total
    return s.cache_ram_mib * MIB


def estimate_memory(
    inventory: ModelInventory,
    args: Sequence[str],
    hardware: Hardware,
    profile: ExecutorProfile,
    *,
    env: Sequence[str] = (),
    ctx: int | None = None,
    mmproj: ModelInventory | None = None,
    draft: ModelInventory | None = None,
) -> MemoryPlan:
    """The memory a plan's executor is expected to use, estimated from the model's header.

    `args`/`env` are the plan's merged argv and env; `ctx` replaces the argv's context (the
    planner's search for a context that fits). `mmproj` and `draft` are the inventories of
    the projector and draft model the argv names, when they were read.
    """
    s = read_settings(profile, args, env)
    return _estimate(inventory, s, hardware, profile, ctx=ctx, mmproj=mmproj, draft=draft)


def _estimate(
    inventory: ModelInventory,
    s: MemorySettings,
    hardware: Hardware,
    profile: ExecutorProfile,
    *,
    ctx: int | None,
    mmproj: ModelInventory | None,
    draft: ModelInventory | None,
    by_layer: ByLayer | None = None,
) -> MemoryPlan:
    """`estimate_memory` from the argv's settings, already read (and `by_layer`, the
    inventory's `bytes_by_layer`, where the caller has it)."""
    sh = shape(inventory, s, ctx)
    p = place(inventory, s, hardware, profile.kind)
    host, devices = _model_parts(inventory, s, sh, p, by_layer)
    kv_total = host[0].kv + sum(d[0].kv for d in devices)  # the model's own: every block's
    if draft is not None:
        d_host, d_devices = _model_parts(
            draft, s, shape(draft, s, sh.ctx), place(draft, s, hardware, profile.kind)
        )
        host = _add(host, d_host)
        devices = [_add(a, b) for a, b in zip(devices, d_devices, strict=True)]
    if mmproj is not None:
        w = MemoryParts(weights=mmproj.tensor_bytes)
        if p.devices and s.gpu_layers != 0:
            devices[0] = _add(devices[0], (w, w))
        else:
            host = _add(host, (w, w))
    cache = prompt_cache_bytes(s, kv_total)
    h_res = replace(host[0], prompt_cache=cache)
    h_rsd = replace(host[1], prompt_cache=cache)
    return MemoryPlan(
        source="estimated",
        ctx=sh.ctx,
        host=PlaceMemory(
            name="Host",
            total=h_rsd.total,
            parts=h_rsd,
            reserved=h_res.total,
            reserved_parts=h_res,
            available=host_available(hardware),
        ),
        devices=tuple(
            PlaceMemory(
                name=name,
                total=rsd.total,
                parts=rsd,
                reserved=res.total,
                reserved_parts=res,
                available=device_available(hardware, i),
            )
            for i, (name, (res, rsd)) in enumerate(zip(p.devices, devices, strict=True))
        ),
    )


def host_available(hw: Hardware) -> int | None:
    """The host memory a plan is judged against: what is usable now, else the total;
    None when neither is known."""
    if hw.cpu.available is not None:
        return hw.cpu.available
    return hw.cpu.ram or None


def device_available(hw: Hardware, i: int) -> int | None:
    """A device's free memory, else its total; None when neither is known."""
    if i >= len(hw.gpus):
        return None
    g = hw.gpus[i]
    if g.vram_free is not None:
        return g.vram_free
    return g.vram or None


_Pair = tuple[MemoryParts, MemoryParts]
"""(reserved, resident) of one place."""


def _model_parts(
    inv: ModelInventory, s: MemorySettings, sh: Shape, p: Placement, by_layer: ByLayer | None = None
) -> tuple[_Pair, list[_Pair]]:
    w_host, w_dev = weights_by_place(inv, s, p, by_layer)
    kv = kv_bytes(inv, s, sh)
    kv_host = 0
    kv_dev = [0] * len(p.devices)
    for il, b in enumerate(kv):
        d = p.layers[il] if p.kv_on_device else -1
        if d < 0:
            kv_host += b
        else:
            kv_dev[d] += b
    c = compute_bytes(inv, sh, sh.ctx_seq)
    if s.embeddings:
        c = replace(c, logits=0)  # an embedding server pools hidden states: no vocab output
    no_logits = replace(c, logits=0)
    layers_on_host = any(d < 0 for d in p.layers) or not p.devices
    # With every block on a device the host still computes the input layer (a fraction).
    host_c = c if p.output < 0 else no_logits
    if not layers_on_host:
        host_c = replace(host_c, activations=c.activations // 8, attention=0)
    host_compute = host_c.reserved
    # What a request touches of the host's compute: the activations and one output row per
    # slot, never the rest of the reserved logits (a server decodes one output a sequence).
    # The attention's mask and scores are touched for the cells in use only: a prompt as
    # long as the context would touch them all (up to `attention` more).
    touched = host_c.activations + inv.vocab * 4 * sh.seqs
    other = RESIDENT_BASE + RESIDENT_PER_TOKEN * inv.vocab
    host = (
        MemoryParts(weights=w_host, kv=kv_host, compute=host_compute),
        MemoryParts(weights=w_host, kv=kv_host, compute=touched, other=other),
    )
    devices: list[_Pair] = []
    for i in range(len(p.devices)):
        has_layers = any(d == i for d in p.layers)
        dev_c = c if p.output == i else no_logits
        comp = dev_c.reserved if has_layers or p.output == i else 0
        part = MemoryParts(weights=w_dev[i], kv=kv_dev[i], compute=comp)
        devices.append((part, part))  # a device commits what it reserves
    return host, devices


def _sum(a: MemoryParts, b: MemoryParts) -> MemoryParts:
    return MemoryParts(
        weights=a.weights + b.weights,
        kv=a.kv + b.kv,
        compute=a.compute + b.compute,
        prompt_cache=a.prompt_cache + b.prompt_cache,
        other=max(a.other, b.other),  # one process: its fixed overhead counts once
    )


def _add(a: _Pair, b: _Pair) -> _Pair:
    return _sum(a[0], b[0]), _sum(a[1], b[1])


def matching_measurement(
    hw: Hardware,
    profile: ExecutorProfile,
    model: str,
    args: Sequence[str],
    env: Sequence[str] = (),
) -> FitMeasurement | None:
    """The host's measurement of `model` made with the same memory settings as this argv and
    env (`exedra_engine._core.memory.fit_params.measurement_for`), the last one taken; a path on
    another machine matches by its file name."""
    return measurement_for(hw.measurements, profile, model, args, env)


def with_measurement(est: MemoryPlan, m: FitMeasurement) -> MemoryPlan:
    """The estimate with the engine's own reserved figures: its measured rows replace the
    reserved parts (the prompt cache, which llama-fit-params does not count, stays); the
    host's resident peak stays estimated (the engine's figures are what it reserves)."""

    def parts(row: FitRow, cache: int) -> MemoryParts:
        return MemoryParts(
            weights=row.model, kv=row.context, compute=row.compute, prompt_cache=cache
        )

    host_res = parts(m.host, est.host.reserved_parts.prompt_cache)
    host = replace(est.host, reserved=host_res.total, reserved_parts=host_res)
    rows = {r.name: r for r in m.devices}
    devices = []
    for d in est.devices:
        row = rows.get(d.name)
        if row is None:
            devices.append(d)
            continue
        p = parts(row, 0)
        devices.append(replace(d, total=p.total, parts=p, reserved=p.total, reserved_parts=p))
    known = {d.name for d in est.devices}
    for row in m.devices:
        if row.name not in known:
            p = parts(row, 0)
            devices.append(
                PlaceMemory(
                    name=row.name,
                    total=p.total,
                    parts=p,
                    reserved=p.total,
                    reserved_parts=p,
                    available=row.free or None,
                )
            )
    return MemoryPlan(source="measured", ctx=m.ctx or est.ctx, host=host, devices=tuple(devices))


def fitter_off(s: MemorySettings) -> tuple[str, ...]:
    """The settings that switch llama.cpp's own fitter off (common/fit.cpp): ``-ngl``,
    ``-ts``, ``-ot`` and a row or tensor split mode."""
    out = []
    if "gpu_layers" in s.explicit:
        out.append("-ngl")
    if "tensor_split" in s.explicit:
        out.append("-ts")
    if s.override_tensor:
        out.append("-ot")
    if s.split_mode in ("row", "tensor"):
        out.append(f"--split-mode {s.split_mode}")
    return tuple(out)


def size_text(n: int) -> str:
    """Bytes as people read them: ``231 MiB``, ``3.2 GiB``."""
    if n >= 10 * (1 << 30):
        return f"{n / (1 << 30):.0f} GiB"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    return f"{-(-n // MIB)} MiB"


def parts_text(p: MemoryParts) -> str:
    """``weights 231 MiB + kv 49 MiB + compute 132 MiB + prompt cache 512 MiB``."""
    named = (
        ("weights", p.weights),
        ("kv", p.kv),
        ("compute", p.compute),
        ("prompt cache", p.prompt_cache),
        ("other", p.other),
    )
    return " + ".join(f"{name} {size_text(v)}" for name, v in named if v) or "0 MiB"


def biggest_part(p: MemoryParts) -> tuple[str, int]:
    """The largest part's name and size."""
    named = (
        ("weights", p.weights),
        ("KV cache", p.kv),
        ("compute buffers", p.compute),
        ("prompt cache", p.prompt_cache),
        ("other", p.other),
    )
    return max(named, key=lambda kv: kv[1])


def explain_memory(plan: MemoryPlan, host_usable: tuple[int, str] | None = None) -> tuple[str, ...]:
    """The arithmetic, one line a place: ``ctx 16384: Host: weights 231 MiB + ... = 924
    MiB <= 3.2 GiB usable``. `host_usable` is the host budget the planner judged by and how
    it was found (default: the host's `available`)."""
    lines = []
    for place_ in (plan.host, *plan.devices):
        host = place_.name == "Host"
        judged = place_.parts if host else place_.reserved_parts
        # The host's resident figure is always the estimate's: the engine measures what it
        # reserves.
        figure = "resident, estimated" if host else f"reserved, {plan.source}"
        line = (
            f"ctx {plan.ctx}: {place_.name} ({figure}): {parts_text(judged)}"
            f" = {size_text(judged.total)}"
        )
        if place_.name == "Host" and host_usable is not None:
            op = "<=" if judged.total <= host_usable[0] else ">"
            line += f" {op} {size_text(host_usable[0])} usable ({host_usable[1]})"
        elif place_.available is not None:
            op = "<=" if judged.total <= place_.available else ">"
            what = "usable" if place_.name == "Host" else "free"
            line += f" {op} {size_text(place_.available)} {what}"
        if host and place_.reserved != place_.total:
            line += f"; reserves {size_text(place_.reserved)}"
        lines.append(line)
        if host and plan.source == "measured":
            lines.append(
                f"ctx {plan.ctx}: Host (reserved, measured): "
                f"{parts_text(place_.reserved_parts)} = {size_text(place_.reserved)}"
            )
    return tuple(lines)


# --- Deciding: what the planner does with the estimate -----------------------------------

HOST_MARGIN: Final = 10
"""Percent of the host's usable memory kept out of every plan: the resident figure is an
estimate, and the process is not alone (page cache, the kernel, a sidecar)."""


class MemoryDecision(Value, frozen=True, kw_only=True):
    """What the planner adds to the engine layer for memory, the plan's memory, and why."""

    memory: MemoryPlan
    engine_args: tuple[str, ...] = ()
    """``--ctx-size N`` when the model's own context does not fit, ``--cache-ram N`` sized
    to what is left; nothing a layer set itself."""
    notes: tuple[str, ...] = ()
    """The arithmetic and the decisions, for ``--explain``."""


def usable_host(hw: Hardware) -> tuple[int | None, str]:
    """The host memory a plan may fill (`HOST_MARGIN` kept out), and how it was found."""
    if hw.cpu.available is not None:
        total, what = hw.cpu.available, "available"
    elif hw.cpu.ram:
        total, what = hw.cpu.ram, "total, free memory unknown"
    else:
        return None, "host memory unknown: not judged"
    margin = total * HOST_MARGIN // 100
    return total - margin, f"{size_text(total)} {what} - {HOST_MARGIN}% margin"


def decide_memory(
    inventory: ModelInventory,
    args: Sequence[str],
    env: Sequence[str],
    hardware: Hardware,
    profile: ExecutorProfile,
    *,
    mmproj: ModelInventory | None = None,
    draft: ModelInventory | None = None,
    items: Sequence[Item] | None = None,
    settings: MemorySettings | None = None,
    budget: tuple[int, str] | None = None,
) -> MemoryDecision:
    """The plan's memory for its merged argv and env, raising `DoesNotFit` when a setting a
    layer chose cannot fit; an unset context that does not fit becomes the largest that
    does (never below 4096 tokens unless the model's own is smaller), and an unset
    ``--cache-ram`` gets what is left of the budget (at most its default). `items` are
    `args` as the profile's table reads them, and `settings` their `read_settings`, where
    the caller has them (the merge's). `budget` replaces the host's usable memory and its
    explanation (`usable_host`): a group member's share (`exedra_engine._core.group`)."""
    return _Decider(
        inventory,
        args,
        env=env,
        hw=hardware,
        profile=profile,
        sides=(mmproj, draft),
        items=items,
        settings=settings,
        budget=budget,
    ).run()


class _Decider:
    def __init__(
        self,
        inv: ModelInventory,
        args: Sequence[str],
        *,
        env: Sequence[str],
        hw: Hardware,
        profile: ExecutorProfile,
        sides: tuple[ModelInventory | None, ModelInventory | None],
        items: Sequence[Item] | None = None,
        settings: MemorySettings | None = None,
        budget: tuple[int, str] | None = None,
    ) -> None:
        self.inv, self.args, self.env, self.hw, self.p, self.sides = (
            inv,
            args,
            env,
            hw,
            profile,
            sides,
        )
        self.s = (
            settings if settings is not None else read_settings(profile, args, env, items=items)
        )
        # Every estimate places the same weights: by layer once (needed with devices only).
        self.by_layer = bytes_by_layer(inv) if device_names(hw, profile.kind) else None
        self.usable, self.how = budget if budget is not None else usable_host(hw)
        self.fixed_ctx = "ctx" in self.s.explicit and self.s.ctx > 0
        self.fixed_cache = "cache_ram" in self.s.explicit
        self.judge_devices = bool(fitter_off(self.s))
        # The context search, the cache sizing and the final figure ask for the same argv
        # more than once; an estimate costs ~0.5 ms.
        self.seen: dict[tuple[str, ...], MemoryPlan] = {}

    def est(self, extra: Sequence[str]) -> MemoryPlan:
        key = tuple(extra)
        if key not in self.seen:
            mmproj, draft = self.sides
            self.seen[key] = _estimate(
                self.inv,
                self.settings(extra),
                self.hw,
                self.p,
                ctx=None,
                mmproj=mmproj,
                draft=draft,
                by_layer=self.by_layer,
            )
        return self.seen[key]

    def settings(self, extra: Sequence[str]) -> MemorySettings:
        """`read_settings` of the argv with `extra` (`flags`: a context and a prompt cache,
        flags that no layer set) after it, from the settings already read: a flag added
        last wins over any earlier one and over its variable."""
        s = self.s
        if not extra:
            return s
        found = dict(zip(extra[::2], extra[1::2], strict=True))
        ctx = found.get(self.p.memory_flags["ctx"])
        cache = found.get(self.p.memory_flags["cache_ram"])
        roles = {role for role, flag in self.p.memory_flags.items() if flag in found}
        return replace(
            s,
            ctx=s.ctx if ctx is None else _int(ctx, 0),
            cache_ram_mib=s.cache_ram_mib if cache is None else _int(cache, DEFAULT_CACHE_RAM_MIB),
            explicit=s.explicit | roles,
        )

    def flags(self, ctx: int | None, cache_mib: int | None) -> tuple[str, ...]:
        out: tuple[str, ...] = ()
        if ctx is not None:
            out += (self.p.memory_flags["ctx"], str(ctx))
        if cache_mib is not None and not self.fixed_cache:
            out += (self.p.memory_flags["cache_ram"], str(cache_mib))
        return out

    def overflow(self, m: MemoryPlan) -> PlaceMemory | None:
        if self.usable is not None and m.host.total > self.usable:
            return m.host
        for d in m.devices if self.judge_devices else ():
            if d.available is not None and d.reserved > d.available:
                return d
        return None

    def refuse(self, m: MemoryPlan, where: PlaceMemory, what: str = "") -> DoesNotFit:
        if not what:
            what = f"ctx {m.ctx}" if self.fixed_ctx else f"the model's context {m.ctx}"
        return _does_not_fit(m, where, self.usable, self.how, what)

    def choose_ctx(self, notes: list[str]) -> int | None:
        """None when the argv's context fits; else the largest that does."""
        first = self.est(self.flags(None, 0))
        bad = self.overflow(first)
        if bad is None:
            return None
        if self.fixed_ctx or self.usable is None or bad.name != "Host":
            raise self.refuse(first, bad)
        ctx = _largest_fitting(
            self.inv, lambda c: self.overflow(self.est(self.flags(c, 0))) is None
        )
        if ctx is None:
            m = self.est(self.flags(min(FALLBACK_CTX, self.inv.context or FALLBACK_CTX), 0))
            raise self.refuse(
                m, self.overflow(m) or m.host, f"the smallest context planned, {m.ctx},"
            )
        notes.append(
            f"the model's context {self.inv.context or first.ctx} does not fit "
            f"{size_text(self.usable)} usable: planned ctx {ctx}, the largest that fits"
        )
        return ctx

    def run(self) -> MemoryDecision:
        notes: list[str] = []
        ctx = self.choose_ctx(notes)
        cache_mib = None if self.fixed_cache else self.cache_size(ctx, notes)
        engine = self.flags(ctx, cache_mib)
        final = self.est(engine)
        measured = matching_measurement(
            self.hw, self.p, self.inv.paths[0], (*self.args, *engine), self.env
        )
        if measured is not None:
            final = with_measurement(final, measured)
            bad = self.overflow(final)
            if bad is not None:
                raise self.refuse(final, bad)
        return MemoryDecision(memory=final, engine_args=engine, notes=(*self.lines(final), *notes))

    def cache_size(self, ctx: int | None, notes: list[str]) -> int:
        """MiB of host prompt cache: room for `PROMPT_CACHE_STATES` copies of the planned
        KV cache (at least `PROMPT_CACHE_FLOOR_MIB`), never more than the default nor than
        what the budget leaves. The executor's default, 8 GiB a process whatever the model,
        would make a 300 MiB model's cgroup limit 9 GiB, and several executors on one host
        each claim it."""
        base = self.est(self.flags(ctx, 0))
        kv = base.host.parts.kv + sum(d.parts.kv for d in base.devices)
        share = max(PROMPT_CACHE_FLOOR_MIB, -(-PROMPT_CACHE_STATES * kv // MIB))
        cache = min(DEFAULT_CACHE_RAM_MIB, share)
        why = (
            f"{PROMPT_CACHE_STATES} x the KV cache ({size_text(kv)}), "
            f"at least {PROMPT_CACHE_FLOOR_MIB} MiB"
        )
        if self.usable is not None:
            left = max((self.usable - base.host.total) // MIB, 0)
            if left < cache:
                cache, why = left, "what the budget leaves"
        flag = self.p.memory_flags["cache_ram"]
        notes.append(
            f"{flag} {cache}: the host prompt cache gets {why} ({self.p.binary}'s default is "
            f"{DEFAULT_CACHE_RAM_MIB} MiB a process; a layer that sets {flag} decides)"
        )
        return cache

    def lines(self, m: MemoryPlan) -> list[str]:
        budget = (self.usable, self.how) if self.usable is not None else None
        lines = list(explain_memory(m, budget))
        if budget is None:
            lines.append(self.how)
        for i, g in enumerate(self.hw.gpus[: len(m.devices)]):
            if g.vram_free is None and g.vram:
                lines.append(f"{m.devices[i].name}: free memory unknown, judged by its total")
        if self.judge_devices and m.devices:
            lines.append(
                "devices judged by their free memory: "
                + ", ".join(fitter_off(self.s))
                + " switch llama.cpp's own fitter off"
            )
        return lines


def _largest_fitting(inv: ModelInventory, fits: Callable[[int], bool]) -> int | None:
    """The largest context, in whole 256-token pages, from the model's own (or 4096) down
    to 4096 (or the model's own when smaller) for which `fits` holds; None if none does."""
    top = inv.context or FALLBACK_CTX
    floor = min(FALLBACK_CTX, top)
    if not fits(floor):
        return None
    lo, hi = floor // CTX_PAD, max(top // CTX_PAD, floor // CTX_PAD)
    while lo < hi:  # memory grows with the context: bisect over pages
        mid = (lo + hi + 1) // 2
        if fits(mid * CTX_PAD):
            lo = mid
        else:
            hi = mid - 1
    return max(lo * CTX_PAD, floor)


def _does_not_fit(
    m: MemoryPlan, where: PlaceMemory, usable: int | None, how: str, what: str
) -> DoesNotFit:
    host = where.name == "Host"
    parts = where.parts if host else where.reserved_parts
    need = parts.total
    have = usable if host else where.available
    name, size = biggest_part(parts)
    place = "host memory" if host else f"{where.name}'s free memory"
    there = f"{size_text(have or 0)} usable ({how})" if host else f"{size_text(have or 0)} free"
    return DoesNotFit(
        f"{what} needs {size_text(need)} of {place} but {there}; the biggest part is "
        f"the {name}, {size_text(size)} ({parts_text(parts)})"
    )
