"""How much memory a llama.cpp executor will use for a plan: a pure estimate.

From the model's inventory (`exedra_engine._core.gguf.inventory`), the planned argv (its
`memory.settings`, read through the profile's flag table and its `memory_flags`) and the host
snapshot, `estimate_memory` computes for the host and each device the weights, the KV cache
(and recurrent state), the compute buffers and the host prompt cache, twice: what llama.cpp
**reserves** (what it allocates; a device fit is judged by it) and the expected **resident**
peak (what a cgroup counts). The KV cache is `memory.kv`'s, the weights' places
`memory.placement`'s; the compute buffers, the prompt cache and the resident figure are
here. The arithmetic mirrors llama.cpp's (src/llama-context.cpp, llama-kv-cache*.cpp,
tools/server); the constants it cannot derive are calibrated against measurements
(docs/explanation.md, "Memory") and named here.

Deterministic; no I/O. A measurement by the engine itself (`FitMeasurement`) replaces the
reserved figures when one matches (`with_measurement`, applied by `memory.decide`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from msgspec.structs import replace

from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.gguf.inventory import ModelInventory
from exedra_engine._core.host.machine import Hardware
from exedra_engine._core.memory.fit_params import FitMeasurement, FitRow, measurement_for
from exedra_engine._core.memory.kv import ContextGeometry, context_geometry, kv_bytes
from exedra_engine._core.memory.placement import (
    ByLayer,
    Placement,
    place,
    weights_by_place,
)
from exedra_engine._core.memory.plan import MemoryParts, MemoryPlan, PlaceMemory
from exedra_engine._core.memory.settings import MIB, MemorySettings, read_settings
from exedra_engine._core.struct import Value

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


ENCODER_ARCHITECTURES: Final = frozenset(
    {
        "bert",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "modern-bert",
        "t5encoder",
    }
)
"""llama.cpp's architectures whose graph ends at the hidden states (no output head): an
embedding server of one computes no logits. Any other model (a decoder used for embeddings)
computes the vocabulary's logits for every token of a pooled input, since llama.cpp marks
every token an output when embeddings are on."""


def vocab_output(architecture: str) -> bool:
    """Whether llama.cpp computes vocabulary logits for a model of `architecture` ("":
    unknown, taken as a decoder, the larger figure)."""
    return architecture not in ENCODER_ARCHITECTURES


def pooled_logits_bytes(vocab: int, tokens: int) -> int:
    """The logits one pooled input of `tokens` tokens makes a decoder hold at once, measured
    with Gemma 3 270M (VmHWM 16.8 GB for 7,842 tokens at ubatch 8192): the graph's
    ``n_vocab x n_tokens`` f32 result and the output buffer it is copied to, as large."""
    return 2 * 4 * vocab * tokens


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


def compute_bytes(inv: ModelInventory, sh: ContextGeometry, kv_cells: int) -> Compute:
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


SERVED_LIVE_ROWS: Final = 3
"""f32 rows per ubatch token a device's compute buffer holds at its peak, of the feed-forward
width and of the embedding each (the gate, the up projection and their product; the residual,
the norm and the attention output), checked against llama-server's own breakdown on
lavapipe: Gemma 3 270M, ctx 8192 and 32768, within 3 %."""


def served_compute(inv: ModelInventory, sh: ContextGeometry, c: Compute, *, output: bool) -> int:
    """The compute buffer llama-server reserves on a device (what the device commits): the
    attention's mask and scores, held through the whole graph, and the larger of a layer's
    live activations and the logits. The server's logits are one row per slot, not per ubatch
    token (tools/server/server-context.cpp sets ``n_outputs_max`` to its slot count), where
    llama-fit-params, which the host's reserved figure follows, sizes them for every token."""
    ff = max((*inv.feed_forward, 1))
    live = 4 * sh.ubatch * SERVED_LIVE_ROWS * (ff + inv.embedding)
    logits = min(c.logits, inv.vocab * 4 * sh.seqs) if output else 0
    return c.attention + max(live, logits)


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
    return estimate_from_settings(
        inventory, s, hardware, profile, ctx=ctx, mmproj=mmproj, draft=draft
    )


def estimate_from_settings(
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
    sh = context_geometry(inventory, s, ctx)
    p = place(inventory, s, hardware, profile.kind)
    host, devices = _model_parts(inventory, s, sh, p, by_layer)
    kv_total = host[0].kv + sum(d[0].kv for d in devices)  # the model's own: every block's
    if draft is not None:
        d_host, d_devices = _model_parts(
            draft, s, context_geometry(draft, s, sh.ctx), place(draft, s, hardware, profile.kind)
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
                available=device_available(hardware, i, profile.kind),
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


def device_available(hw: Hardware, i: int, kind: str) -> int | None:
    """The free memory of the `kind` executor's `i`-th device (`Hardware.offload_devices`),
    else its total; None when neither is known."""
    devices = hw.offload_devices(kind)
    return devices[i].available if i < len(devices) else None


_Pair = tuple[MemoryParts, MemoryParts]
"""(reserved, resident) of one place."""


def _model_parts(
    inv: ModelInventory,
    s: MemorySettings,
    sh: ContextGeometry,
    p: Placement,
    by_layer: ByLayer | None = None,
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
    pooled = 0
    if s.embeddings and not vocab_output(inv.architecture):
        c = replace(c, logits=0)  # an encoder's graph ends at the hidden states
    elif s.embeddings:
        # Every token of an input is an output: an input filling the ubatch touches its
        # logits and their copy in the output buffer.
        pooled = pooled_logits_bytes(inv.vocab, min(sh.ubatch, sh.ctx_seq))
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
    touched = host_c.activations + max(inv.vocab * 4 * sh.seqs, pooled)
    other = RESIDENT_BASE + RESIDENT_PER_TOKEN * inv.vocab
    host = (
        MemoryParts(weights=w_host, kv=kv_host, compute=host_compute),
        MemoryParts(weights=w_host, kv=kv_host, compute=touched, other=other),
    )
    devices: list[_Pair] = []
    for i in range(len(p.devices)):
        has_layers = any(d == i for d in p.layers)
        comp = (
            served_compute(inv, sh, c, output=p.output == i) if has_layers or p.output == i else 0
        )
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
