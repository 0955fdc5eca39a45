"""The tensor inventory of one GGUF file, read from its header alone.

`parse_gguf_inventory` reads the whole key/value section (the tensor infos follow it) and
then every tensor info, never the tensor data. Bounds, beyond the cursor's own: llama.cpp's
(at most 4 dimensions, 64-byte names are its limit; we allow longer but bounded ones), a
tensor count no real model approaches, element counts that fit an int64 as ggml requires,
known ggml types only, and every tensor's bytes inside the file, so no product downstream can
exceed the file's size.
"""

from __future__ import annotations

import struct
from typing import BinaryIO, Final

from exedra_engine._core.gguf.cursor import (
    ARRAY,
    FIXED,
    INT_TYPES,
    MAX_ARRAY_STRINGS,
    MAX_KEPT_INTS,
    MAX_KEPT_STRING,
    MAX_KEY,
    SIZES,
    STRING,
    U32,
    U64,
    Cursor,
    Malformed,
    Truncated,
    preamble,
    skip_value,
)
from exedra_engine._core.gguf.inventory import GGML_TYPES, ModelInventory, TensorInfo
from exedra_engine._core.gguf.labels import CHAT_TEMPLATE, LABELS, tuning
from exedra_engine._core.outcome import boundary
from exedra_engine._core.struct import freeze
from exedra_engine.errors import NotGGUF

MAX_TENSORS: Final = 1 << 16
"""Tensors of one model, every shard of a split set together (a large MoE holds ~2,000)."""
MAX_SHARDS: Final = 1024
"""Shards of a split set (gguf-split numbers up to 99,999; a 1 T-parameter model at 50 GB a
shard needs ~40)."""
MAX_DIMS: Final = 4
MAX_BLOCKS: Final = 4096
_MAX_TENSOR_NAME: Final = 1024
_MAX_LAYER_ARRAY: Final = 1 << 14
_INT64_MAX: Final = (1 << 63) - 1
_BOOL: Final = 7

# Keys read after the architecture's name: ``{arch}.<suffix>``.
_ARCH_SUFFIXES: Final = frozenset(
    {
        "block_count",
        "context_length",
        "pooling_type",
        "embedding_length",
        "feed_forward_length",
        "vocab_size",
        "expert_count",
        "expert_used_count",
        "attention.head_count",
        "attention.head_count_kv",
        "attention.key_length",
        "attention.value_length",
        "attention.key_length_swa",
        "attention.value_length_swa",
        "attention.sliding_window",
        "attention.sliding_window_pattern",
        "attention.kv_lora_rank",
        "attention.key_length_mla",
        "ssm.conv_kernel",
        "ssm.inner_size",
        "ssm.state_size",
        "ssm.group_count",
        "wkv.head_size",
        "token_shift_count",
        "shortconv.l_cache",
    }
)
_GENERAL_INTS: Final = frozenset(
    {"general.file_type", "general.alignment", "split.count", "split.no"}
)
_TOKENS: Final = "tokenizer.ggml.tokens"

# llama.cpp's default SWA pattern per architecture (src/models/*.cpp, load_swa_pattern):
# (n_pattern, dense_first). Architectures not named here do not use a sliding window
# unless their header gives a per-layer pattern.
SWA_PATTERNS: Final[dict[str, tuple[int, bool]]] = freeze(
    {
        "gemma2": (2, False),
        "gemma3": (6, False),
        "gemma-embedding": (6, False),
        "gemma3n": (5, False),
        "cohere2": (4, False),
        "cohere2moe": (4, True),
        "exaone4": (4, False),
        "exaone-moe": (4, False),
        "llama4": (4, False),
        "olmo2": (4, False),
        "gpt-oss": (2, False),
        "afmoe": (4, False),
        "plamo3": (8, False),
        "smallthinker": (4, True),
        "modern-bert": (3, True),
        "phi3": (1, False),
    }
)


class UnsizedTensors(NotGGUF):
    """A header this library reads but whose tensors it cannot size: a ggml type newer than
    it. The model is planned without a memory plan; every other fault is an error."""


class _NewerType(Malformed):
    pass


def read_gguf_inventory(
    src: BinaryIO, size: int, path: str = "", *, max_tensors: int = MAX_TENSORS
) -> tuple[ModelInventory, int, int]:
    """Read the tensor inventory of one GGUF file of `size` bytes: the inventory, and the
    file's ``split.count`` and ``split.no`` (0, 0 for an unsplit model).

    Bounded like `parse_gguf_header`, and reads every key/value (the tensor infos follow
    them) but never the tensor data. `max_tensors` is what is left of a split set's
    `MAX_TENSORS` (the shards before used the rest).
    """
    try:
        return _parse_inventory(Cursor(src, size), path, max_tensors)
    except _NewerType as e:
        raise UnsizedTensors(f"not a GGUF file this library can size: {e}") from None
    except (Truncated, Malformed) as e:
        raise NotGGUF(f"not a GGUF file: {e}") from None


parse_gguf_inventory = boundary(read_gguf_inventory)
"""`read_gguf_inventory` as a Result: ``Success((inventory, split_count, split_no))``, or
``Failure`` with its `EngineError`."""


_Kept = dict[str, "int | tuple[int, ...]"]


def _parse_inventory(
    cur: Cursor, path: str, max_tensors: int = MAX_TENSORS
) -> tuple[ModelInventory, int, int]:
    _, tensor_count, kv_count = preamble(cur)
    if tensor_count > max_tensors:
        whole = "" if max_tensors == MAX_TENSORS else " with the shards before it"
        raise Malformed(
            f"tensor count {tensor_count}{whole} is more than any model holds (at most "
            f"{MAX_TENSORS} in all)"
        )
    strings, kept, vocab_tokens = _walk_all(cur, kv_count)
    arch = strings.get("general.architecture")
    if arch is None:
        raise Malformed("no general.architecture key")
    alignment = _scalar(kept, "general.alignment", 32)
    if alignment <= 0 or alignment & (alignment - 1) or alignment > 1 << 20:
        raise Malformed(f"general.alignment {alignment} is not a power of two up to 1 MiB")
    tensors = _tensor_infos(cur, tensor_count, alignment)
    inv = _inventory(
        arch,
        strings=strings,
        kept=kept,
        vocab_tokens=vocab_tokens,
        tensors=tensors,
        path=path,
        size=cur.size,
    )
    return inv, _scalar(kept, "split.count", 0), _scalar(kept, "split.no", 0)


def _walk_all(cur: Cursor, kv_count: int) -> tuple[dict[str, str], _Kept, int]:
    strings: dict[str, str] = {}
    kept: _Kept = {}
    vocab_tokens = 0
    for i in range(kv_count):
        key = cur.string(MAX_KEY, f"key {i}")
        vtype = cur.u32(f"the type of {key!r}")
        if key in ("general.architecture", "general.name"):
            if vtype != STRING:
                raise Malformed(f"{key} has type {vtype}, expected a string")
            strings[key] = cur.string(MAX_KEPT_STRING, key)
            continue
        if vtype == STRING and _label(cur, key, strings):
            continue
        wanted = key in _GENERAL_INTS or _arch_key(key, strings.get("general.architecture"))
        if wanted and (key in kept or len(kept) < MAX_KEPT_INTS):
            if vtype in INT_TYPES or vtype == _BOOL:
                kept[key] = int(cur.fixed(vtype, key))
                continue
            if vtype == ARRAY:
                kept[key] = _int_array(cur, key)
                continue
        if key == _TOKENS and vtype == ARRAY:
            vocab_tokens = _skip_vocabulary(cur, key)
            continue
        skip_value(cur, vtype, key)
    return strings, kept, vocab_tokens


def _label(cur: Cursor, key: str, strings: dict[str, str]) -> bool:
    """Keep a label string, or the chat template's length (the template is skipped
    unread); whether `key` was one of them."""
    if key in LABELS:
        strings[key] = cur.string(MAX_KEPT_STRING, key)
        return True
    if key == CHAT_TEMPLATE:
        n = cur.u64(key)
        cur.skip(n, key)
        strings[key] = str(n)
        return True
    return False


def _skip_vocabulary(cur: Cursor, key: str) -> int:
    """Skip the vocabulary's strings, unread: their count."""
    etype = cur.u32(f"the element type of {key!r}")
    count = cur.u64(f"the length of {key!r}")
    if etype != STRING:
        raise Malformed(f"{key} has element type {etype}, expected strings")
    if count > cur.remaining() // 8 or count > MAX_ARRAY_STRINGS:
        raise Malformed(f"array {key!r} of {count} strings cannot be a vocabulary")
    cur.skip_strings(count, key)
    return count


def _arch_key(key: str, arch: str | None) -> bool:
    if arch is not None:
        return key.startswith(arch + ".") and key[len(arch) + 1 :] in _ARCH_SUFFIXES
    # Before the architecture is known every architecture's keys are kept (bounded by
    # MAX_KEPT_INTS); names of architectures hold no dot.
    return key.partition(".")[2] in _ARCH_SUFFIXES


def _int_array(cur: Cursor, key: str) -> tuple[int, ...]:
    etype = cur.u32(f"the element type of {key!r}")
    count = cur.u64(f"the length of {key!r}")
    if etype not in INT_TYPES and etype != _BOOL:
        raise Malformed(f"{key} is an array of type {etype}, expected integers")
    width = SIZES[etype]
    if count > cur.remaining() // width:
        raise Malformed(f"array {key!r} of {count} elements cannot fit in the file")
    if count > _MAX_LAYER_ARRAY:
        raise Malformed(f"array {key!r} of {count} elements is longer than any model's layers")
    cur._fill(count * width, key)
    fmt = f"<{count}{FIXED[etype][1]}"
    values = struct.unpack_from(fmt, cur.buf, cur.pos)
    cur.pos += count * width
    return tuple(int(v) for v in values)


_DIMS_TAIL: Final = freeze({n: struct.Struct(f"<{n}QIQ") for n in range(1, MAX_DIMS + 1)})


def _tensor_infos(cur: Cursor, count: int, alignment: int) -> tuple[TensorInfo, ...]:
    # The hot loop of a large model's header: the buffer is read with precompiled structs,
    # and error messages are formatted only when one is raised.
    if count > cur.remaining() // 24:
        raise Malformed(f"tensor count {count} cannot fit in the file")
    what = "the tensor infos"
    u64, u32 = U64.unpack_from, U32.unpack_from
    raw: list[tuple[str, int, tuple[int, ...], int, int]] = []
    for i in range(count):
        cur._fill(8, what)
        (n,) = u64(cur.buf, cur.pos)
        if n > _MAX_TENSOR_NAME:
            if n > cur.remaining():
                raise Truncated(cur.size, what)
            raise Malformed(f"the name of tensor {i} is {n} bytes long")
        cur._fill(12 + n, what)
        buf, pos = cur.buf, cur.pos
        name = buf[pos + 8 : pos + 8 + n].decode("utf-8", errors="replace")
        (n_dims,) = u32(buf, pos + 8 + n)
        if not 1 <= n_dims <= MAX_DIMS:
            raise Malformed(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS})")
        tail = _DIMS_TAIL[n_dims]
        cur._fill(12 + n + tail.size, what)
        buf, pos = cur.buf, cur.pos
        *dims, ttype, offset = tail.unpack_from(buf, pos + 12 + n)
        cur.pos = pos + 12 + n + tail.size
        shape = tuple(dims)
        nbytes = _tensor_bytes(name, shape, ttype)
        if offset % alignment:
            raise Malformed(f"tensor {name!r}: offset {offset} is not {alignment}-aligned")
        raw.append((name, ttype, shape, nbytes, offset))
    data = -(-cur.offset // alignment) * alignment
    room = cur.size - data
    out = []
    expected = 0
    for name, ttype, shape, nbytes, offset in raw:
        if offset > room or nbytes > room - offset:
            raise Malformed(
                f"tensor {name!r} ({nbytes} bytes at {offset}) lies past the file's end"
            )
        if offset != expected:
            # ggml's gguf reader requires exactly this layout (gguf_init_from_file_impl:
            # "tensor ... has offset ..., expected ..."): tensors one after the other, each
            # padded to the alignment. Overlapping tensors would count the same bytes twice.
            how = "overlaps the one before" if offset < expected else "leaves a gap"
            raise Malformed(
                f"tensor {name!r} is at data offset {offset}, expected {expected}: it {how} "
                "(tensors lie in order, back to back)"
            )
        expected = offset + -(-nbytes // alignment) * alignment
        out.append(TensorInfo(name=name, type=ttype, shape=shape, size=nbytes))
    return tuple(out)


def _tensor_bytes(name: str, shape: tuple[int, ...], ttype: int) -> int:
    """The bytes of a tensor of `shape` and ggml type `ttype`, raising `Malformed` for a
    shape that overflows or is not whole blocks, or an unknown type."""
    elements = 1
    for d in shape:
        if d > _INT64_MAX or (d and elements > _INT64_MAX // d):
            raise Malformed(f"tensor {name!r} of shape {shape} overflows an int64")
        elements *= d
    traits = GGML_TYPES.get(ttype)
    if traits is None:
        raise _NewerType(f"tensor {name!r} has unknown ggml type {ttype}")
    tname, blk, bsize = traits
    if shape[0] % blk:
        raise Malformed(f"tensor {name!r}: row of {shape[0]} is not whole {tname} blocks")
    return elements // blk * bsize


def _scalar(kept: _Kept, key: str, default: int) -> int:
    v = kept.get(key, default)
    if isinstance(v, tuple):
        raise Malformed(f"{key} is an array, expected one number")
    return v


def _inventory(
    arch: str,
    *,
    strings: dict[str, str],
    kept: _Kept,
    vocab_tokens: int,
    tensors: tuple[TensorInfo, ...],
    path: str,
    size: int,
) -> ModelInventory:
    def num(suffix: str) -> int:
        v = _scalar(kept, f"{arch}.{suffix}", 0)
        if v < 0 or v > _INT32_MAX:
            raise Malformed(f"{arch}.{suffix} is {v} (0 to {_INT32_MAX} expected)")
        return v

    blocks = num("block_count")
    if blocks > MAX_BLOCKS:
        raise Malformed(
            f"{arch}.block_count {blocks} is more than any model has (at most {MAX_BLOCKS})"
        )

    def per_layer(suffix: str) -> tuple[int, ...]:
        v = kept.get(f"{arch}.{suffix}", 0)
        vals = v if isinstance(v, tuple) else (v,) * blocks
        if any(x < 0 or x > _INT32_MAX for x in vals):
            raise Malformed(f"{arch}.{suffix} holds a value outside 0-{_INT32_MAX}")
        return (vals + (0,) * blocks)[:blocks]

    head_count_kv = per_layer("attention.head_count_kv")
    if f"{arch}.attention.head_count_kv" not in kept:
        head_count_kv = per_layer("attention.head_count")  # llama.cpp: n_head_kv = n_head
    window = num("attention.sliding_window")
    recurrent_keys = any(num(k) for k in ("ssm.state_size", "wkv.head_size", "shortconv.l_cache"))
    return ModelInventory(
        paths=(path,),
        sizes=(size,),
        architecture=arch,
        name=strings.get("general.name", ""),
        chat_template=int(strings.get(CHAT_TEMPLATE, "0")),
        tuning=tuning(
            strings.get("general.finetune", ""),
            strings.get("general.name", ""),
            strings.get("general.basename", ""),
        ),
        file_type=_scalar(kept, "general.file_type", -1) if "general.file_type" in kept else None,
        tensors=tensors,
        blocks=blocks,
        context=num("context_length"),
        pooling=num("pooling_type") if f"{arch}.pooling_type" in kept else -1,
        embedding=num("embedding_length"),
        vocab=num("vocab_size") or min(vocab_tokens, _INT32_MAX),
        feed_forward=per_layer("feed_forward_length"),
        head_count=per_layer("attention.head_count"),
        head_count_kv=head_count_kv,
        key_length=num("attention.key_length"),
        value_length=num("attention.value_length"),
        key_length_swa=num("attention.key_length_swa"),
        value_length_swa=num("attention.value_length_swa"),
        sliding_window=window,
        swa_layers=_swa_layers(arch, kept, blocks) if window else (False,) * blocks,
        kv_lora_rank=num("attention.kv_lora_rank"),
        key_length_mla=num("attention.key_length_mla"),
        expert_count=num("expert_count"),
        expert_used_count=num("expert_used_count"),
        ssm_conv_kernel=num("ssm.conv_kernel"),
        ssm_inner_size=num("ssm.inner_size"),
        ssm_state_size=num("ssm.state_size"),
        ssm_group_count=num("ssm.group_count"),
        wkv_head_size=num("wkv.head_size"),
        token_shift_count=num("token_shift_count"),
        shortconv_l_cache=num("shortconv.l_cache"),
        recurrent_layers=tuple(recurrent_keys and n == 0 for n in head_count_kv),
    )


def _swa_layers(arch: str, kept: _Kept, blocks: int) -> tuple[bool, ...]:
    """Which layers slide, as llama.cpp's load_swa_pattern decides: a per-layer array in
    the header wins, then the header's pattern number, then the architecture's default."""
    v = kept.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(v, tuple):
        return tuple(bool(x) for x in (v + (0,) * blocks)[:blocks])
    default = SWA_PATTERNS.get(arch)
    if default is None and v is None:
        return (False,) * blocks
    n, dense_first = default or (0, False)
    if v is not None:
        n = v
    if dense_first:
        return tuple(n == 0 or i % n != 0 for i in range(blocks))
    return tuple(n == 0 or i % n < n - 1 for i in range(blocks))


_INT32_MAX: Final = 2**31 - 1
