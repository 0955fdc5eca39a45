"""Issue 19 item 1: the tensor inventory against gguf's own reader, and hostile headers
(tensor counts, dimensions and types that overflow or lie) as typed errors in bounded time
and memory."""

from __future__ import annotations

import io
import struct
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success

from exedra_engine import NotGGUF
from exedra_engine._core.gguf.inventory import GGML_TYPES, ModelInventory
from exedra_engine._core.gguf.inventory_reader import parse_gguf_inventory
from exedra_engine._shell.inspect import read_inventory
from properties.conftest import scaled
from properties.test_gguf_props import models, write

_NUMPY = {0: np.float32, 1: np.float16, 24: np.int8, 25: np.int16, 26: np.int32}


@settings(max_examples=scaled(40))
@given(
    st.lists(
        st.tuples(
            st.sampled_from(sorted(_NUMPY)),
            st.lists(st.integers(1, 9), min_size=1, max_size=4),
        ),
        max_size=6,
    ),
    st.sampled_from(["llama", "gemma3", "qwen2moe"]),
)
def test_inventory_agrees_with_gguf_reader(tensors: list[tuple[int, list[int]]], arch: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.gguf"
        w = gguf.GGUFWriter(str(p), arch)
        w.add_uint32(f"{arch}.block_count", 3)
        for i, (ttype, dims) in enumerate(tensors):
            w.add_tensor(f"blk.{i % 3}.t{i}", np.zeros(dims, dtype=_NUMPY[ttype]))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        inv = read_inventory(p).unwrap()
        r = gguf.GGUFReader(str(p))
        assert [(t.name, t.type, t.shape, t.size) for t in inv.tensors] == [
            (t.name, int(t.tensor_type), tuple(int(x) for x in t.shape), int(t.n_bytes))
            for t in r.tensors
        ]


def _bounded(data: bytes) -> ModelInventory | None:
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        r = parse_gguf_inventory(io.BytesIO(data), len(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 2.0
    assert peak < 4 * len(data) + (2 << 20), peak
    if isinstance(r, Failure):
        assert isinstance(r.failure(), NotGGUF)
        return None
    assert isinstance(r, Success)
    inv: ModelInventory = r.unwrap()[0]
    # Whatever it accepted, every byte it counts lies in the file.
    assert all(0 <= t.size <= len(data) for t in inv.tensors)
    assert inv.tensor_bytes <= len(data)
    assert len(inv.head_count_kv) == len(inv.swa_layers) == inv.blocks
    return inv


@settings(max_examples=scaled(100))
@given(models(), st.data())
def test_inventory_mutations_give_a_typed_error_or_a_bounded_result(
    m: dict[str, Any], data: st.DataObject
) -> None:
    if m["blocks"] is not None:
        m["blocks"] = m["blocks"] % 600
    with tempfile.TemporaryDirectory() as d:
        raw = bytearray(write(Path(d) / "m.gguf", m).read_bytes())
    how = data.draw(st.sampled_from(["truncate", "flip", "huge", "type", "none"]))
    at = data.draw(st.integers(0, len(raw) - 1))
    if how == "truncate":
        raw = raw[:at]
    elif how == "flip":
        raw[at] ^= data.draw(st.integers(1, 255))
    elif how == "huge":
        big = data.draw(st.sampled_from([2**63, 2**64 - 1, 2**40, 2**32, 2**31]))
        raw[at : at + 8] = big.to_bytes(8, "little")
    elif how == "type":
        raw[at : at + 4] = data.draw(st.integers(0, 64)).to_bytes(4, "little")
    _bounded(bytes(raw))


def _s(x: bytes) -> bytes:
    return struct.pack("<Q", len(x)) + x


@settings(max_examples=scaled(200))
@given(
    st.lists(
        st.tuples(
            st.binary(max_size=12),
            st.integers(0, 6),
            st.lists(
                st.sampled_from([0, 1, 32, 255, 256, 2**31, 2**32, 2**62, 2**64 - 1]), max_size=6
            ),
            st.sampled_from([*GGML_TYPES, 4, 5, 31, 42, 2**31]),
            st.sampled_from([0, 32, 64, 2**40, 2**64 - 32]),
        ),
        max_size=5,
    ),
    st.integers(0, 3),
    st.integers(0, 4096),
)
def test_hostile_tensor_infos(
    tensors: list[tuple[bytes, int, list[int], int, int]], extra_count: int, pad: int
) -> None:
    # n_dims may disagree with the dimensions that follow, and the count may lie.
    body = b"GGUF" + struct.pack("<IQQ", 3, len(tensors) + extra_count, 1)
    body += _s(b"general.architecture") + struct.pack("<I", 8) + _s(b"llama")
    for name, n_dims, dims, ttype, off in tensors:
        body += _s(name) + struct.pack("<I", n_dims)
        body += b"".join(struct.pack("<Q", x) for x in dims)
        body += struct.pack("<IQ", ttype, off)
    _bounded(body + b"\0" * pad)
