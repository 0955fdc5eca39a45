"""Write a loadable llama GGUF of several GiB that takes almost no disk: the tiny model's
vocabulary and metadata (exedra_engine.testing), 2 blocks of width 32, and feed-forward tensors
of N_FF rows each left as holes in a sparse file (zeros when read). llama-server loads it like
any model of that size, so a load's progress can be watched without downloading one.

usage: write_sparse_model.py PATH [GIB]   (GIB: the approximate size, default 3)
"""

from __future__ import annotations

import sys
from pathlib import Path


def write_sparse_llama(path: str, gib: float = 3.0) -> Path:
    """The sparse model at `path`, about `gib` GiB (its six feed-forward tensors)."""
    import gguf
    import numpy as np

    from exedra_engine.testing import models as testing

    n_embd = testing.TINY_WIDTH
    n_ff = max(64, int(gib * (1 << 30) / 6 / (n_embd * 4)))
    tokens, scores, types = testing._vocab()
    w = gguf.GGUFWriter(path, testing.TINY_ARCH)
    testing._llama_metadata(w, tokens, scores, types, quantized=False)
    # The metadata's feed-forward length is the tiny one: this model's comes after, last wins.
    w.kv_data[0].pop(gguf.Keys.LLM.FEED_FORWARD_LENGTH.format(arch=testing.TINY_ARCH), None)
    w.add_feed_forward_length(n_ff)
    rng = np.random.default_rng(7)
    n_vocab = len(tokens)
    embd = (rng.standard_normal((n_vocab, n_embd)) * 0.1).astype(np.float32)
    embd[:, 0] = 1.0
    dense: dict[str, np.ndarray] = {
        "token_embd.weight": embd,
        "output_norm.weight": np.ones(n_embd, dtype=np.float32),
        "output.weight": (rng.standard_normal((n_vocab, n_embd))).astype(np.float32),
    }
    holes: dict[str, tuple[int, int]] = {}
    for i in range(testing.TINY_BLOCKS):
        p = f"blk.{i}."
        for name in ("attn_norm", "ffn_norm"):
            dense[p + name + ".weight"] = np.ones(n_embd, dtype=np.float32)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            dense[p + name + ".weight"] = np.zeros((n_embd, n_embd), dtype=np.float32)
        holes[p + "ffn_gate.weight"] = (n_ff, n_embd)
        holes[p + "ffn_up.weight"] = (n_ff, n_embd)
        holes[p + "ffn_down.weight"] = (n_embd, n_ff)
    order = list(dense) + list(holes)
    for name in order:
        shape = dense[name].shape if name in dense else holes[name]
        nbytes = int(np.prod(shape)) * 4
        w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    align = w.data_alignment
    with open(path, "r+b") as f:
        end = f.seek(0, 2)
        offset = -end % align
        f.write(b"\0" * offset)
        for name in order:
            shape = dense[name].shape if name in dense else holes[name]
            nbytes = int(np.prod(shape)) * 4
            if name in dense:
                f.write(dense[name].tobytes())
            else:
                f.seek(nbytes, 1)  # a hole
            pad = -nbytes % align
            f.seek(pad, 1)
        f.truncate(f.tell())
    return Path(path)


if __name__ == "__main__":
    size = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    print(write_sparse_llama(sys.argv[1], size))
