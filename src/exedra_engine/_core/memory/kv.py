"""The context geometry llama.cpp derives from the settings, and the bytes of each block's KV
cache or recurrent state (src/llama-context.cpp, llama-kv-cache*.cpp). Pure."""

from __future__ import annotations

from typing import Final, TypeVar

from exedra_engine._core.gguf.inventory import CACHE_TYPES, ModelInventory
from exedra_engine._core.memory.settings import MemorySettings
from exedra_engine._core.struct import Value

AUTO_PARALLEL: Final = 4
"""``-np`` unset (auto) means 4 slots sharing one unified KV cache."""
FALLBACK_CTX: Final = 4096
"""The context when neither the argv nor the model names one."""
CTX_PAD: Final = 256
"""llama.cpp pads the context (and each slot's, and the SWA cache) to whole 256 cells."""
_T = TypeVar("_T")


class ContextGeometry(Value, frozen=True, kw_only=True):
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


def context_geometry(
    inv: ModelInventory, s: MemorySettings, ctx: int | None = None
) -> ContextGeometry:
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
    return ContextGeometry(
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


def kv_bytes(inv: ModelInventory, s: MemorySettings, sh: ContextGeometry) -> tuple[int, ...]:
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


def _kv_block(
    inv: ModelInventory, s: MemorySettings, sh: ContextGeometry, il: int, swa: bool
) -> int:
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
