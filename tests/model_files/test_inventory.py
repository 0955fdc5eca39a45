"""Issue 19 item 1: the tensor inventory from the GGUF header (per-layer metadata, SWA,
split models, hostile tensor infos)."""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from returns.result import Failure, Success

from exedra_engine import ModelUnreadable, NotGGUF
from exedra_engine._core.gguf.inventory import ModelInventory, shard_paths, type_bytes
from exedra_engine._core.gguf.inventory_reader import MAX_TENSORS, parse_gguf_inventory
from exedra_engine._shell.inspect import read_inventory
from exedra_engine.testing import write_tiny_llama


def _reference(path: Path) -> dict[str, tuple[int, tuple[int, ...], int]]:
    r = gguf.GGUFReader(str(path))
    return {
        t.name: (int(t.tensor_type), tuple(int(x) for x in t.shape), int(t.n_bytes))
        for t in r.tensors
    }


@pytest.mark.parametrize("quantized", [False, True])
def test_inventory_agrees_with_gguf_reader(tmp_path: Path, quantized: bool) -> None:
    p = write_tiny_llama(tmp_path / "t.gguf", quantized=quantized)
    inv = read_inventory(p).unwrap()
    assert {t.name: (t.type, t.shape, t.size) for t in inv.tensors} == _reference(p)
    assert inv.paths == (str(p),)
    assert inv.size == p.stat().st_size
    assert (inv.architecture, inv.blocks, inv.embedding) == ("llama", 2, 32)
    assert inv.head_count_kv == (4, 4)
    assert inv.vocab == len(gguf.GGUFReader(str(p)).get_field("tokenizer.ggml.tokens").data)
    assert inv.tensor_bytes < inv.size
    assert inv.swa_layers == (False, False)
    assert {t.layer for t in inv.tensors} == {None, 0, 1}


def _write(path: Path, arch: str, meta: dict[str, Any], n_tensors: int = 2) -> Path:
    w = gguf.GGUFWriter(str(path), arch)
    for k, v in meta.items():
        if isinstance(v, list):
            w.add_array(k, v)
        elif isinstance(v, str):
            w.add_string(k, v)
        else:
            w.add_uint32(k, v)
    for i in range(n_tensors):
        w.add_tensor(f"blk.{i}.attn_q.weight", np.zeros((4, 32), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gemma3_swa_pattern_every_sixth_layer_global(tmp_path: Path) -> None:
    p = _write(
        tmp_path / "g.gguf",
        "gemma3",
        {
            "gemma3.block_count": 18,
            "gemma3.attention.sliding_window": 512,
            "gemma3.attention.head_count": 4,
            "gemma3.attention.head_count_kv": 1,
            "gemma3.attention.key_length": 256,
            "gemma3.attention.value_length": 256,
        },
    )
    inv = read_inventory(p).unwrap()
    assert inv.sliding_window == 512
    assert [i for i, s in enumerate(inv.swa_layers) if not s] == [5, 11, 17]
    assert inv.head_count_kv == (1,) * 18


def test_the_pooling_type_is_read_and_its_absence_is_not_none(tmp_path: Path) -> None:
    meta = {"bert.block_count": 2, "bert.pooling_type": 2}
    assert read_inventory(_write(tmp_path / "b.gguf", "bert", meta)).unwrap().pooling == 2
    meta = {"bert.block_count": 2, "bert.pooling_type": 0}
    assert read_inventory(_write(tmp_path / "n.gguf", "bert", meta)).unwrap().pooling == 0
    plain = read_inventory(_write(tmp_path / "p.gguf", "bert", {"bert.block_count": 2}))
    assert plain.unwrap().pooling == -1


def test_per_layer_arrays_win(tmp_path: Path) -> None:
    pattern = [i % 2 == 0 for i in range(4)]
    p = _write(
        tmp_path / "g.gguf",
        "gemma3",
        {
            "gemma3.block_count": 4,
            "gemma3.attention.sliding_window": 128,
            "gemma3.attention.sliding_window_pattern": pattern,
            "gemma3.attention.head_count_kv": [2, 0, 4, 8],
            "gemma3.feed_forward_length": [64, 64, 128, 128],
        },
    )
    inv = read_inventory(p).unwrap()
    assert inv.swa_layers == tuple(pattern)
    assert inv.head_count_kv == (2, 0, 4, 8)
    assert inv.feed_forward == (64, 64, 128, 128)
    assert inv.recurrent_layers == (False,) * 4  # no recurrent sizes: a 0 is not a state


def test_hybrid_recurrent_layers(tmp_path: Path) -> None:
    p = _write(
        tmp_path / "j.gguf",
        "jamba",
        {
            "jamba.block_count": 4,
            "jamba.attention.head_count_kv": [0, 0, 8, 0],
            "jamba.ssm.state_size": 16,
            "jamba.ssm.inner_size": 256,
            "jamba.ssm.conv_kernel": 4,
        },
    )
    inv = read_inventory(p).unwrap()
    assert inv.recurrent_layers == (True, True, False, True)
    assert (inv.ssm_state_size, inv.ssm_inner_size, inv.ssm_conv_kernel) == (16, 256, 4)


def _split(tmp_path: Path, count: int) -> list[Path]:
    out = []
    for i in range(count):
        p = tmp_path / f"m-{i + 1:05d}-of-{count:05d}.gguf"
        meta: dict[str, Any] = {"split.no": i, "split.count": count}
        if i == 0:
            meta |= {"llama.block_count": 2, "llama.attention.head_count": 4}
        w = gguf.GGUFWriter(str(p), "llama")
        for k, v in meta.items():
            w.add_uint16(k, v) if k.startswith("split") else w.add_uint32(k, v)
        w.add_tensor(f"blk.{i}.ffn_up.weight", np.zeros((8, 32), dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        out.append(p)
    return out


def test_split_model_reads_every_shard(tmp_path: Path) -> None:
    paths = _split(tmp_path, 3)
    assert shard_paths(str(paths[0])) == tuple(str(p) for p in paths)
    inv = read_inventory(paths[0]).unwrap()
    assert inv.paths == tuple(str(p) for p in paths)
    assert inv.size == sum(p.stat().st_size for p in paths)
    assert [t.name for t in inv.tensors] == [f"blk.{i}.ffn_up.weight" for i in range(3)]
    assert inv.blocks == 2


def test_split_model_missing_shard(tmp_path: Path) -> None:
    paths = _split(tmp_path, 3)
    paths[2].unlink()
    err = read_inventory(paths[0])
    assert isinstance(err, Failure)
    assert isinstance(err.failure(), ModelUnreadable)
    assert "00003-of-00003" in str(err.failure())


def test_split_count_disagrees_with_name(tmp_path: Path) -> None:
    paths = _split(tmp_path, 2)
    renamed = tmp_path / "x-00001-of-00003.gguf"
    paths[0].rename(renamed)
    err = read_inventory(renamed)
    assert isinstance(err, Failure) and isinstance(err.failure(), NotGGUF)


# A hand-built header: every tensor info field is ours to corrupt.
def _gguf(tensors: list[tuple[str, list[int], int, int]], *, pad: int = 4096) -> bytes:
    def s(x: str) -> bytes:
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    kv = s("general.architecture") + struct.pack("<I", 8) + s("llama")
    body = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1) + kv
    for name, dims, ttype, off in tensors:
        body += s(name) + struct.pack("<I", len(dims))
        body += b"".join(struct.pack("<Q", d) for d in dims)
        body += struct.pack("<IQ", ttype, off)
    body += b"\0" * (-len(body) % 32)
    return body + b"\0" * pad


def _inv(data: bytes) -> ModelInventory | NotGGUF:
    match parse_gguf_inventory(io.BytesIO(data), len(data)):
        case Success((inv, _, _)):
            return inv  # type: ignore[no-any-return]
        case Failure(e):
            return e  # type: ignore[no-any-return]
    raise AssertionError


@pytest.mark.parametrize(
    ("tensors", "says"),
    [
        ([("a", [32, 1, 1, 1, 1], 0, 0)], "dimensions"),
        ([("a", [32], 99, 0)], "unknown ggml type"),
        ([("a", [2**62, 2**62], 0, 0)], "overflows"),
        ([("a", [2**63 + 1], 0, 0)], "overflows"),
        ([("a", [33], 2, 0)], "blocks"),
        ([("a", [1 << 20], 0, 0)], "past the file's end"),
        ([("a", [32], 0, 2**64 - 32)], "past the file's end"),
        ([("a", [32], 0, 3)], "aligned"),
    ],
)
def test_hostile_tensor_infos_are_typed(
    tensors: list[tuple[str, list[int], int, int]], says: str
) -> None:
    got = _inv(_gguf(tensors))
    assert isinstance(got, NotGGUF)
    assert says in str(got)


def test_sane_hand_built_header() -> None:
    # a: 4 Q8_0 blocks of 34 bytes = 136, padded to 160 (b sat at 128 before ggml's layout
    # rule was checked: overlapping a by 8 bytes)
    got = _inv(_gguf([("a", [64, 2], 8, 0), ("b", [256], 12, 160)]))
    assert isinstance(got, ModelInventory)
    assert [t.size for t in got.tensors] == [type_bytes(8, 128), 144]


def test_tensor_count_is_bounded() -> None:
    data = b"GGUF" + struct.pack("<IQQ", 3, MAX_TENSORS + 1, 0) + b"\0" * (32 * (MAX_TENSORS + 2))
    got = _inv(data)
    assert isinstance(got, NotGGUF)
    assert "tensor count" in str(got)
