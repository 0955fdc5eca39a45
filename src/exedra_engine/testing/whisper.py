"""A tiny whisper.cpp model (its legacy ggml format) and a WAV tone, for the tests and the
executor proofs of ``whisper-server``.

This module imports numpy when called; the rest of the library never does.
"""

from __future__ import annotations

import os
from pathlib import Path

# whisper.cpp's legacy ggml model format (whisper.cpp src/whisper.cpp, whisper_model_load):
# magic, 11 int32 hyper-parameters, the mel filter bank, the vocabulary, then tensors.
_GGML_MAGIC = 0x67676D6C
WHISPER_VOCAB = 51_864  # English-only: below 51,865 whisper.cpp is not multilingual


def _whisper_tensors(
    s: int, n_mels: int, n_audio_ctx: int, n_text_ctx: int
) -> list[tuple[str, tuple[int, ...], str]]:
    """whisper.cpp's tensors for one encoder and one decoder layer of width `s`, in order."""
    s4 = 4 * s
    out: list[tuple[str, tuple[int, ...], str]] = [
        ("encoder.positional_embedding", (s, n_audio_ctx), "f32"),
        ("encoder.conv1.weight", (3, n_mels, s), "f16"),
        ("encoder.conv1.bias", (1, s), "f32"),
        ("encoder.conv2.weight", (3, s, s), "f16"),
        ("encoder.conv2.bias", (1, s), "f32"),
        ("encoder.ln_post.weight", (s,), "f32"),
        ("encoder.ln_post.bias", (s,), "f32"),
        ("decoder.positional_embedding", (s, n_text_ctx), "f32"),
        ("decoder.token_embedding.weight", (s, WHISPER_VOCAB), "f16"),
        ("decoder.ln.weight", (s,), "f32"),
        ("decoder.ln.bias", (s,), "f32"),
    ]
    for side, attns in {"encoder": ("attn",), "decoder": ("attn", "cross_attn")}.items():
        p = f"{side}.blocks.0."
        out += [
            (p + "mlp_ln.weight", (s,), "f32"),
            (p + "mlp_ln.bias", (s,), "f32"),
            (p + "mlp.0.weight", (s, s4), "f16"),
            (p + "mlp.0.bias", (s4,), "f32"),
            (p + "mlp.2.weight", (s4, s), "f16"),
            (p + "mlp.2.bias", (s,), "f32"),
        ]
        for a in attns:
            out += [
                (p + f"{a}_ln.weight", (s,), "f32"),
                (p + f"{a}_ln.bias", (s,), "f32"),
                (p + f"{a}.query.weight", (s, s), "f16"),
                (p + f"{a}.query.bias", (s,), "f32"),
                (p + f"{a}.key.weight", (s, s), "f16"),
                (p + f"{a}.value.weight", (s, s), "f16"),
                (p + f"{a}.value.bias", (s,), "f32"),
                (p + f"{a}.out.weight", (s, s), "f16"),
                (p + f"{a}.out.bias", (s,), "f32"),
            ]
    return out


def write_tiny_whisper(path: str | os.PathLike[str], *, seed: int = 7) -> Path:
    """Write a loadable whisper model: 1 encoder and 1 decoder layer of width 8, the full
    51,864-token English vocabulary, f16 weights (whisper.cpp asserts on all-f32 ones)."""
    import struct

    import numpy as np

    rng = np.random.default_rng(seed)
    n_state, n_head, n_mels, n_audio_ctx, n_text_ctx = 8, 1, 80, 1500, 448
    f16, f32 = 1, 0
    out = Path(path)
    with open(out, "wb") as fh:
        fh.write(struct.pack("<I", _GGML_MAGIC))
        fh.write(
            struct.pack(
                "<11i",
                WHISPER_VOCAB,
                n_audio_ctx,
                n_state,
                n_head,
                1,
                n_text_ctx,
                n_state,
                n_head,
                1,
                n_mels,
                f16,
            )
        )
        n_fft = 201
        fh.write(struct.pack("<ii", n_mels, n_fft))
        fh.write(np.abs(rng.standard_normal(n_mels * n_fft) * 0.01).astype("<f4").tobytes())
        # The decoder's text clean-up looks up " ", " -" and " '": they must exist.
        words = [" ", " -", " '"] + [f" w{i}" for i in range(3, WHISPER_VOCAB)]
        fh.write(struct.pack("<i", len(words)))
        for w in words:
            b = w.encode()
            fh.write(struct.pack("<I", len(b)) + b)

        def tensor(name: str, ne: tuple[int, ...], ttype: int, scale: float = 0.1) -> None:
            n = int(np.prod(ne))
            data = rng.standard_normal(n) * scale
            raw = data.astype("<f2" if ttype == f16 else "<f4").tobytes()
            enc = name.encode()
            fh.write(struct.pack("<iii", len(ne), len(enc), ttype))
            fh.write(struct.pack(f"<{len(ne)}i", *ne))
            fh.write(enc + raw)

        for name, ne, ttype in _whisper_tensors(n_state, n_mels, n_audio_ctx, n_text_ctx):
            tensor(name, ne, f16 if ttype == "f16" else f32)
    return out


def write_wav(
    path: str | os.PathLike[str], *, seconds: float = 1.0, rate: int = 16_000, hz: float = 440.0
) -> Path:
    """Write a mono 16-bit WAV tone, the input whisper-server's /inference takes."""
    import math
    import struct
    import wave

    out = Path(path)
    n = int(seconds * rate)
    frames = b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * hz * i / rate))) for i in range(n)
    )
    with wave.open(str(out), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames)
    return out
