"""GGUF headers from hypothesis through the gguf writer: the reader agrees with
gguf.GGUFReader, and mutations give a typed error or a correct result, never another
exception, a hang or unbounded memory (issue 5, hostile inputs)."""

from __future__ import annotations

import io
import tempfile
import tracemalloc
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success

from exedra_engine import NotGGUF, inspect
from exedra_engine._core.gguf.header import HeaderFacts, parse_gguf_header
from exedra_engine._core.gguf.quant import quant_name
from properties.conftest import scaled

keys = st.from_regex(r"[a-z]{1,8}\.[a-z_]{1,12}", fullmatch=True)
scalars = st.one_of(
    st.tuples(st.just("u32"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("i64"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("f32"), st.floats(width=32, allow_nan=False)),
    st.tuples(st.just("bool"), st.booleans()),
    st.tuples(st.just("str"), st.text(min_size=1, max_size=20)),
    st.tuples(st.just("strs"), st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=30)),
    st.tuples(st.just("ints"), st.lists(st.integers(0, 1000), min_size=1, max_size=30)),
)


@st.composite
def models(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "arch": draw(st.sampled_from(["llama", "qwen2", "gemma3", "whisper", "x"])),
        "name": draw(st.none() | st.text(min_size=1, max_size=30)),
        "file_type": draw(st.none() | st.sampled_from([int(t) for t in gguf.LlamaFileType])),
        "blocks": draw(st.none() | st.integers(0, 2**31)),
        "context": draw(st.none() | st.integers(0, 2**31)),
        "extra": draw(st.lists(st.tuples(keys, scalars), max_size=8, unique_by=lambda x: x[0])),
        "order": draw(st.permutations(range(5))),
        "tensors": draw(st.integers(0, 4)),
    }


def write(path: Path, m: dict[str, Any]) -> Path:
    w = gguf.GGUFWriter(str(path), m["arch"])
    wanted = [
        lambda: m["name"] is not None and w.add_name(m["name"]),
        lambda: m["file_type"] is not None and w.add_uint32("general.file_type", m["file_type"]),
        lambda: m["blocks"] is not None and w.add_uint32(f"{m['arch']}.block_count", m["blocks"]),
        lambda: (
            m["context"] is not None and w.add_uint64(f"{m['arch']}.context_length", m["context"])
        ),
        lambda: [_extra(w, k, v) for k, v in m["extra"]],
    ]
    for i in m["order"]:
        wanted[i]()
    for i in range(m["tensors"]):
        w.add_tensor(f"t{i}", np.zeros(2, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _extra(w: Any, key: str, value: tuple[str, Any]) -> None:
    if key.startswith("general.") or key.endswith((".block_count", ".context_length")):
        return
    kind, v = value
    {
        "u32": w.add_uint32,
        "i64": w.add_int64,
        "f32": w.add_float32,
        "bool": w.add_bool,
        "str": w.add_string,
        "strs": w.add_array,
        "ints": w.add_array,
    }[kind](key, v)


@settings(max_examples=scaled(60))
@given(models())
def test_agrees_with_gguf_reader(m: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = write(Path(d) / "m.gguf", m)
        got = inspect(p).unwrap()
        r = gguf.GGUFReader(str(p))

        def field(k: str) -> Any:
            f = r.get_field(k)
            return None if f is None else f.contents()

        assert got.architecture == field("general.architecture")
        assert got.name == (field("general.name") or "")
        assert got.quant == quant_name(field("general.file_type"))
        assert got.blocks == (field(f"{m['arch']}.block_count") or 0)
        assert got.context == (field(f"{m['arch']}.context_length") or 0)


def _safe(data: bytes) -> HeaderFacts | None:
    tracemalloc.start()
    try:
        r = parse_gguf_header(io.BytesIO(data), len(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(data) + (1 << 20), peak
    if isinstance(r, Failure):
        assert isinstance(r.failure(), NotGGUF)
        return None
    assert isinstance(r, Success)
    return r.unwrap()


@settings(max_examples=scaled(100))
@given(models(), st.data())
def test_mutations_give_a_typed_error_or_a_result(m: dict[str, Any], data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as d:
        raw = bytearray(write(Path(d) / "m.gguf", m).read_bytes())
    how = data.draw(st.sampled_from(["truncate", "flip", "huge", "type"]))
    at = data.draw(st.integers(0, len(raw) - 1))
    if how == "truncate":
        raw = raw[:at]
    elif how == "flip":
        raw[at] ^= data.draw(st.integers(1, 255))
    elif how == "huge":
        raw[at : at + 8] = data.draw(st.sampled_from([2**63, 2**64 - 1, 2**40, 2**32])).to_bytes(
            8, "little"
        )
    else:
        raw[at : at + 4] = data.draw(st.integers(0, 64)).to_bytes(4, "little")
    _safe(bytes(raw))


@given(st.binary(max_size=512))
def test_random_bytes_after_a_valid_magic(tail: bytes) -> None:
    _safe(b"GGUF\x03\x00\x00\x00" + tail)


@settings(max_examples=scaled(100))
@given(st.lists(st.integers(0, 300), min_size=500, max_size=1500), st.data())
def test_long_string_arrays_against_gguf_reader(lengths: list[int], data: st.DataObject) -> None:
    # Enough strings to go through the regex runs, with long ones (>=256) breaking them.
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "v.gguf"
        w = gguf.GGUFWriter(str(p), "llama")
        w.add_array("tokenizer.ggml.tokens", [b"x" * n if n else b"" for n in lengths])
        w.add_uint32("general.file_type", 7)
        w.add_uint32("llama.block_count", len(lengths))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        raw = p.read_bytes()
        got = inspect(p).unwrap()
    assert (got.quant, got.blocks) == ("Q8_0", len(lengths))
    cut = data.draw(st.integers(0, len(raw) - 1))
    facts = _safe(raw[:cut])
    assert facts is None or facts.blocks == len(lengths)
