"""A model's tensor inventory and the hyperparameters memory arithmetic needs, as values.

Read from the GGUF header alone (`exedra_engine._core.gguf.inventory_reader.parse_gguf_inventory`):
every tensor's name, ggml type, shape and byte size, and the architecture's attention, SWA,
MLA, expert and recurrent sizes, each per layer where the header may say so per layer. The
arithmetic that uses them is in `exedra_engine._core.memory` (`kv`, `placement`, `estimate`).
Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import msgspec

from exedra_engine._core.struct import Value, freeze

GGML_TYPES: Final[dict[int, tuple[str, int, int]]] = freeze(
    {
        # type id: (name, elements per block, bytes per block), as ggml.c's type_traits and
        # gguf-py's GGML_QUANT_SIZES have them.
        0: ("F32", 1, 4),
        1: ("F16", 1, 2),
        2: ("Q4_0", 32, 18),
        3: ("Q4_1", 32, 20),
        6: ("Q5_0", 32, 22),
        7: ("Q5_1", 32, 24),
        8: ("Q8_0", 32, 34),
        9: ("Q8_1", 32, 40),
        10: ("Q2_K", 256, 84),
        11: ("Q3_K", 256, 110),
        12: ("Q4_K", 256, 144),
        13: ("Q5_K", 256, 176),
        14: ("Q6_K", 256, 210),
        15: ("Q8_K", 256, 292),
        16: ("IQ2_XXS", 256, 66),
        17: ("IQ2_XS", 256, 74),
        18: ("IQ3_XXS", 256, 98),
        19: ("IQ1_S", 256, 50),
        20: ("IQ4_NL", 32, 18),
        21: ("IQ3_S", 256, 110),
        22: ("IQ2_S", 256, 82),
        23: ("IQ4_XS", 256, 136),
        24: ("I8", 1, 1),
        25: ("I16", 1, 2),
        26: ("I32", 1, 4),
        27: ("I64", 1, 8),
        28: ("F64", 1, 8),
        29: ("IQ1_M", 256, 56),
        30: ("BF16", 1, 2),
        34: ("TQ1_0", 256, 54),
        35: ("TQ2_0", 256, 66),
        39: ("MXFP4", 32, 17),
        40: ("NVFP4", 64, 36),
        41: ("Q1_0", 128, 18),
    }
)

CACHE_TYPES: Final[dict[str, tuple[int, int]]] = freeze(
    {
        # -ctk/-ctv value: (elements per block, bytes per block)
        name.lower(): (blk, size)
        for name, blk, size in GGML_TYPES.values()
        if name in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "IQ4_NL", "Q5_0", "Q5_1")
    }
)


def type_bytes(ggml_type: int, elements: int) -> int:
    """Bytes of `elements` values of `ggml_type` (whole blocks); KeyError for an unknown type."""
    _, blk, size = GGML_TYPES[ggml_type]
    return -(-elements // blk) * size


class TensorInfo(Value, frozen=True, kw_only=True):
    """One tensor as the header describes it."""

    name: str
    type: int
    """The ggml type id (`GGML_TYPES`)."""
    shape: tuple[int, ...]
    """ne[0], ne[1], ... (ggml order: the row length first)."""
    size: int
    """Bytes in the file, from the type's block size."""

    @property
    def layer(self) -> int | None:
        """The block index of a ``blk.N.*`` tensor; None for the others."""
        if not self.name.startswith("blk."):
            return None
        head, _, _ = self.name[4:].partition(".")
        return int(head) if head.isdigit() else None


class ModelInventory(Value, frozen=True, kw_only=True):
    """What a model needs in memory, from its header (every shard's, for a split model).

    Per-layer tuples have one entry per block (a scalar in the header is repeated), so the
    arithmetic never guesses which layers a number applies to.
    """

    paths: tuple[str, ...]
    """The model file, or every shard of a split model in order."""
    sizes: tuple[int, ...]
    """Bytes of each file of `paths`."""
    architecture: str
    name: str = ""
    chat_template: int | None = None
    """Bytes of ``tokenizer.chat_template``: 0 when the header has none; None when not
    read (an inventory made by hand)."""
    tuning: str = ""
    """``instruct`` or ``base`` where the header says so (`labels.tuning`), else ""."""
    file_type: int | None = None
    tensors: tuple[TensorInfo, ...] = ()
    blocks: int = 0
    context: int = 0
    pooling: int = -1
    """``{arch}.pooling_type`` (llama.cpp's enum: 0 none, 1 mean, 2 cls, 3 last, 4 rank);
    -1 when the header has none (llama.cpp then pools nothing)."""
    embedding: int = 0
    vocab: int = 0
    """Tokens (``{arch}.vocab_size`` or the length of ``tokenizer.ggml.tokens``)."""
    feed_forward: tuple[int, ...] = ()
    head_count: tuple[int, ...] = ()
    head_count_kv: tuple[int, ...] = ()
    key_length: int = 0
    """K head size of full-attention layers (0: embedding / heads)."""
    value_length: int = 0
    key_length_swa: int = 0
    """K head size of sliding-window layers (0: as `key_length`)."""
    value_length_swa: int = 0
    sliding_window: int = 0
    """Tokens a sliding-window layer attends to (0: no SWA)."""
    swa_layers: tuple[bool, ...] = ()
    """Which blocks use the sliding window."""
    kv_lora_rank: int = 0
    """MLA's compressed KV rank (DeepSeek-style attention)."""
    key_length_mla: int = 0
    """Non-zero for MLA models converted with decompressed heads: their cache keeps K only."""
    expert_count: int = 0
    expert_used_count: int = 0
    ssm_conv_kernel: int = 0
    ssm_inner_size: int = 0
    ssm_state_size: int = 0
    ssm_group_count: int = 0
    wkv_head_size: int = 0
    token_shift_count: int = 0
    shortconv_l_cache: int = 0
    recurrent_layers: tuple[bool, ...] = ()
    """Which blocks keep a recurrent state instead of a KV cache."""

    @property
    def size(self) -> int:
        """Bytes of every file together."""
        return sum(self.sizes)

    @property
    def tensor_bytes(self) -> int:
        """Bytes of every tensor."""
        return sum([t.size for t in self.tensors])  # (a list: faster than a generator here)


_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def shard_paths(path: str) -> tuple[str, ...] | None:
    """Every shard's path when `path` names the first of a split model
    (``name-00001-of-00003.gguf``); None when it does not."""
    m = _SPLIT.match(path)
    if m is None or int(m["no"]) != 1 or int(m["count"]) < 1:
        return None
    count = int(m["count"])
    return tuple(f"{m['stem']}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1))


def combine_shards(parts: Sequence[ModelInventory]) -> ModelInventory:
    """One inventory of a split model from each shard's, in order: the first shard's
    hyperparameters, every shard's tensors and bytes."""
    first = parts[0]
    return msgspec.structs.replace(
        first,
        paths=tuple(p for part in parts for p in part.paths),
        sizes=tuple(n for part in parts for n in part.sizes),
        tensors=tuple(t for part in parts for t in part.tensors),
    )
