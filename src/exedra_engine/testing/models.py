"""Tiny GGUF models written with the `gguf` package, for the demo, tests and benchmarks.

`write_tiny_llama` writes a complete llama-architecture model that a real ``llama-server``
loads and answers with. `write_arch_model` writes a small model of another architecture's
shape (`ARCH_SHAPES`). `write_header_model` writes a model whose metadata mimics a large real
one (32k or 152k-token vocabularies, many tensors) with one-element tensors, so its header is
realistic while the file stays small.

This module imports gguf and numpy when called; the rest of the library never does.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

TINY_ARCH = "llama"
TINY_BLOCKS = 2
TINY_WIDTH = 32
TINY_CONTEXT = 256
TINY_NAME = "exedra-tiny"

# A chat template simple enough for llama-server's Jinja engine and the built-in detector.
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)

_WORDS = (
    "the of and to in is was for on that with as by it at from his an were are which this be "
    "has had not or one first new they their also after its but two been other who more time "
    "into all when only over some can there most these many would during about up out where "
    "made while three such well then them through both between under may later year world "
    "city known used like part called being each since high state before just life name "
    "music so film album game team season series work best number what hello answer model "
    "engine plan launch ready stop port host key light river stone cloud bright quiet small "
).split()


def _vocab() -> tuple[list[bytes], list[float], list[int]]:
    # SentencePiece layout: <unk>, <s>, </s>, 256 byte tokens, then pieces (types from
    # gguf.constants.TokenType: NORMAL=1, UNKNOWN=2, CONTROL=3, BYTE=6).
    tokens: list[bytes] = [b"<unk>", b"<s>", b"</s>"]
    types = [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>".encode())
        types.append(6)
    pieces = ["\u2581" + w for w in _WORDS] + list("abcdefghijklmnopqrstuvwxyz") + ["\u2581"]
    for c in ".,!?":
        pieces.append(c)
    seen: set[str] = set()
    for p in pieces:
        if p not in seen:
            seen.add(p)
            tokens.append(p.encode())
            types.append(1)
    scores = [0.0 if t != 1 else -float(i) / 100 for i, t in enumerate(types)]
    return tokens, scores, types


def _llama_metadata(
    w: Any, tokens: list[bytes], scores: list[float], types: list[int], *, quantized: bool
) -> None:
    import gguf

    n_embd, n_head = TINY_WIDTH, 4
    w.add_name(TINY_NAME)
    w.add_context_length(TINY_CONTEXT)
    w.add_embedding_length(n_embd)
    w.add_block_count(TINY_BLOCKS)
    w.add_feed_forward_length(64)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if quantized else gguf.LlamaFileType.ALL_F32)
    _add_tokenizer(w, tokens, scores, types)


def _add_tokenizer(w: Any, tokens: Any, scores: Any, types: Any) -> None:
    """The tiny vocabulary every generated model carries, with the chat template the demo's
    question is asked through."""
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(TINY_CHAT_TEMPLATE)


def write_tiny_llama(
    path: str | os.PathLike[str], *, seed: int = 7, quantized: bool = False
) -> Path:
    """Write a loadable 2-block, width-32 llama model (~200 KB) and return its path.

    ``quantized=True`` stores the blocks' q/k/v and gate/up projections as Q8_0, so that a load
    runs the CPU's int8 dot-product kernels (AVX-VNNI, AVX-512 VNNI, AMX) that an all-F32 model
    never reaches: a binary built for instructions the CPU lacks dies there.

    The weights make every generated token a normal word piece: the blocks' output
    projections are zero, so the final hidden state is the token embedding, whose first
    dimension is always positive; the output rows of byte and control tokens point the
    other way, so their logits are far below every word's and the text stays valid UTF-8.
    """
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab()
    n_vocab, n_embd, n_ff = len(tokens), TINY_WIDTH, 64
    out = Path(path)
    w = gguf.GGUFWriter(str(out), TINY_ARCH)
    _llama_metadata(w, tokens, scores, types, quantized=quantized)

    def f32(*shape: int, scale: float = 0.2) -> Any:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def weight(name: str, a: Any) -> None:
        if not quantized:
            w.add_tensor(name, a)
            return
        from gguf.quants import quantize

        q = quantize(a, gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    embd = f32(n_vocab, n_embd, scale=0.1)
    embd[:, 0] = 1.0
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    head = f32(n_vocab, n_embd, scale=1.0)
    normal = np.array(types) == 1
    head[normal, 0] = 2.0
    head[~normal, :] = 0.0
    head[~normal, 0] = -50.0
    w.add_tensor("output.weight", head)
    for i in range(TINY_BLOCKS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        weight(p + "attn_q.weight", f32(n_embd, n_embd))
        weight(p + "attn_k.weight", f32(n_embd, n_embd))
        weight(p + "attn_v.weight", f32(n_embd, n_embd))
        w.add_tensor(p + "attn_output.weight", np.zeros((n_embd, n_embd), dtype=np.float32))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        weight(p + "ffn_gate.weight", f32(n_ff, n_embd))
        weight(p + "ffn_up.weight", f32(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", np.zeros((n_embd, n_ff), dtype=np.float32))
    _finish(w)
    return out


@dataclasses.dataclass(frozen=True)
class ArchShape:
    """The shape of a generated model of one architecture (`write_arch_model`)."""

    arch: str
    blocks: int
    embd: int
    heads: int
    kv_heads: int
    head_dim: int
    ff: int
    vocab: int = 32_000
    context: int = 32_768
    experts: int = 0
    experts_used: int = 0
    expert_ff: int = 0
    sliding_window: int = 0
    swa_pattern: int = 0
    qkv_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False


ARCH_SHAPES: dict[str, ArchShape] = {
    # Small models of the shapes llama.cpp loads for each architecture (src/models/*.cpp),
    # sized so their KV cache and compute buffers matter next to their weights.
    "llama": ArchShape("llama", blocks=12, embd=512, heads=8, kv_heads=4, head_dim=64, ff=1536),
    "qwen2": ArchShape(
        "qwen2", blocks=8, embd=384, heads=6, kv_heads=2, head_dim=64, ff=1024, qkv_bias=True
    ),
    "gemma3": ArchShape(
        "gemma3",
        blocks=12,
        embd=384,
        heads=4,
        kv_heads=1,
        head_dim=128,
        ff=1536,
        sliding_window=512,
        swa_pattern=6,
        qk_norm=True,
        post_norms=True,
    ),
    "qwen3moe": ArchShape(
        "qwen3moe",
        blocks=6,
        embd=256,
        heads=4,
        kv_heads=2,
        head_dim=64,
        ff=768,
        experts=8,
        experts_used=2,
        expert_ff=256,
        qk_norm=True,
    ),
}


def write_arch_model(path: str | os.PathLike[str], arch: str, *, seed: int = 7) -> Path:
    """Write a loadable model of `arch` (a key of `ARCH_SHAPES`: llama, qwen2, gemma3 with its
    sliding window, the qwen3moe mixture of experts) with F16 weights and a 32,000-token
    vocabulary, and return its path.

    As in `write_tiny_llama`, the blocks' output projections are zero and the output head
    favours word pieces, so whatever the server generates is valid text.
    """
    import gguf
    import numpy as np

    sh = ARCH_SHAPES[arch]
    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab()
    for i in range(len(tokens), sh.vocab):
        tokens.append(f"\u2581x{i}".encode())
        types.append(1)
        scores.append(-float(i) / 100)
    out = Path(path)
    w = gguf.GGUFWriter(str(out), sh.arch)
    _arch_metadata(w, sh, tokens, scores, types)

    def f16(*shape: int, scale: float = 0.05) -> Any:
        return (rng.standard_normal(shape, dtype=np.float32) * scale).astype(np.float16)

    embd = f16(sh.vocab, sh.embd, scale=0.1)
    embd[:, 0] = 1.0
    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", np.ones(sh.embd, dtype=np.float32))
    head = f16(sh.vocab, sh.embd, scale=0.5)
    normal = np.array(types) == 1
    head[normal, 0] = 2.0
    head[~normal, :] = 0.0
    head[~normal, 0] = -50.0
    w.add_tensor("output.weight", head)
    for i in range(sh.blocks):
        _arch_block(w, sh, i, f16)
    _finish(w)
    return out


def _arch_metadata(
    w: Any, sh: ArchShape, tokens: list[bytes], scores: list[float], types: list[int]
) -> None:
    import gguf

    w.add_name(f"exedra-{sh.arch}")
    w.add_context_length(sh.context)
    w.add_embedding_length(sh.embd)
    w.add_block_count(sh.blocks)
    w.add_feed_forward_length(sh.ff)
    w.add_head_count(sh.heads)
    w.add_head_count_kv(sh.kv_heads)
    w.add_key_length(sh.head_dim)
    w.add_value_length(sh.head_dim)
    w.add_rope_dimension_count(sh.head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    if sh.experts:
        w.add_expert_count(sh.experts)
        w.add_expert_used_count(sh.experts_used)
        w.add_expert_feed_forward_length(sh.expert_ff)
    if sh.sliding_window:
        w.add_sliding_window(sh.sliding_window)
        w.add_sliding_window_pattern(sh.swa_pattern)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    _add_tokenizer(w, tokens, scores, types)


def _arch_block(w: Any, sh: ArchShape, i: int, f16: Any) -> None:
    """One block's tensors, as llama.cpp's loader of `sh.arch` asks for them; the output
    projections zero (see `write_arch_model`)."""
    import numpy as np

    def ones(n: int) -> Any:
        return np.ones(n, dtype=np.float32)

    def zeros(*shape: int) -> Any:
        return np.zeros(shape, dtype=np.float16)

    p = f"blk.{i}."
    n_q, n_kv = sh.heads * sh.head_dim, sh.kv_heads * sh.head_dim
    w.add_tensor(p + "attn_norm.weight", ones(sh.embd))
    w.add_tensor(p + "attn_q.weight", f16(n_q, sh.embd))
    w.add_tensor(p + "attn_k.weight", f16(n_kv, sh.embd))
    w.add_tensor(p + "attn_v.weight", f16(n_kv, sh.embd))
    if sh.qkv_bias:
        for name, n in (("attn_q", n_q), ("attn_k", n_kv), ("attn_v", n_kv)):
            w.add_tensor(p + name + ".bias", np.zeros(n, dtype=np.float32))
    if sh.qk_norm:
        w.add_tensor(p + "attn_q_norm.weight", ones(sh.head_dim))
        w.add_tensor(p + "attn_k_norm.weight", ones(sh.head_dim))
    w.add_tensor(p + "attn_output.weight", zeros(sh.embd, n_q))
    if sh.post_norms:
        w.add_tensor(p + "post_attention_norm.weight", ones(sh.embd))
        w.add_tensor(p + "post_ffw_norm.weight", ones(sh.embd))
    w.add_tensor(p + "ffn_norm.weight", ones(sh.embd))
    if sh.experts:
        e, f = sh.experts, sh.expert_ff
        w.add_tensor(p + "ffn_gate_inp.weight", f16(e, sh.embd).astype(np.float32))
        w.add_tensor(p + "ffn_gate_exps.weight", f16(e, f, sh.embd))
        w.add_tensor(p + "ffn_up_exps.weight", f16(e, f, sh.embd))
        w.add_tensor(p + "ffn_down_exps.weight", zeros(e, sh.embd, f))
    else:
        w.add_tensor(p + "ffn_gate.weight", f16(sh.ff, sh.embd))
        w.add_tensor(p + "ffn_up.weight", f16(sh.ff, sh.embd))
        w.add_tensor(p + "ffn_down.weight", zeros(sh.embd, sh.ff))


def write_header_model(
    path: str | os.PathLike[str],
    *,
    vocab: int = 151_936,
    merges: int | None = None,
    file_type_after_vocab: bool = True,
    architecture: str = "qwen2",
    name: str = "Synthetic-7B",
    file_type: int = 15,
    blocks: int = 28,
    context: int = 32_768,
    tensors: int = 339,
) -> Path:
    """Write a model whose metadata mimics a large real one, with one-element tensors.

    `merges` defaults to one fewer than `vocab` (a BPE tokenizer); 0 writes none.
    With `file_type_after_vocab`, ``general.file_type`` and the block and context keys
    follow the tokenizer arrays, the worst case for a reader that stops early.
    """
    import gguf
    import numpy as np

    out = Path(path)
    w = gguf.GGUFWriter(str(out), architecture)
    arch_keys = [
        (f"{architecture}.block_count", blocks),
        (f"{architecture}.context_length", context),
        (f"{architecture}.embedding_length", 3584),
        (f"{architecture}.feed_forward_length", 18944),
        (f"{architecture}.attention.head_count", 28),
    ]

    def early() -> None:
        w.add_uint32("general.file_type", file_type)
        for k, v in arch_keys:
            w.add_uint32(k, v)

    w.add_name(name)
    if not file_type_after_vocab:
        early()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    toks = [f"tok{i:06d}\u0120x".encode() for i in range(vocab)]
    w.add_token_list(toks)
    w.add_token_types([1] * vocab)
    n_merges = vocab - 1 if merges is None else merges
    if n_merges:
        w.add_token_merges([f"\u0120t{i} x{i}" for i in range(n_merges)])
    w.add_eos_token_id(2)
    if file_type_after_vocab:
        early()
    one: Any = np.zeros(1, dtype=np.float32)
    for i in range(tensors):
        w.add_tensor(f"blk.{i}.weight", one)
    _finish(w)
    return out


def _finish(w: Any) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
