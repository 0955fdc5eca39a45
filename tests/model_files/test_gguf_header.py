"""inspect() and the header parser: agreement with gguf.GGUFReader, and hostile files."""

from __future__ import annotations

import io
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import gguf
import pytest
from returns.result import Failure, Success

from exedra_engine import ModelUnreadable, NotGGUF, inspect
from exedra_engine._core.gguf.header import parse_gguf_header
from exedra_engine._core.gguf.quant import FILE_TYPES, quant_name
from exedra_engine.testing import write_header_model, write_tiny_llama


def reference(path: Path) -> dict[str, object]:
    """The same facts, read by the gguf package's own reader."""
    r = gguf.GGUFReader(str(path))

    def field(key: str) -> object:
        f = r.get_field(key)
        return None if f is None else f.contents()

    arch = field("general.architecture")
    return {
        "architecture": arch,
        "name": field("general.name") or "",
        "quant": quant_name(field("general.file_type")),  # type: ignore[arg-type]
        "blocks": field(f"{arch}.block_count") or 0,
        "context": field(f"{arch}.context_length") or 0,
    }


def facts(path: Path) -> dict[str, object]:
    m = inspect(path).unwrap()
    assert m.size == os.path.getsize(path)
    assert m.path == str(path)
    return {
        "architecture": m.architecture,
        "name": m.name,
        "quant": m.quant,
        "blocks": m.blocks,
        "context": m.context,
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        {
            "vocab": 32_000,
            "merges": 0,
            "file_type_after_vocab": False,
            "architecture": "llama",
            "file_type": 15,
            "blocks": 32,
            "context": 4096,
        },
        {
            "vocab": 32_000,
            "file_type_after_vocab": True,
            "architecture": "mistral3",
            "file_type": 7,
            "blocks": 40,
            "context": 131072,
            "name": "Mistral-ish 🚀",
        },
        # gguf.GGUFReader takes ~10 s over a 152k-token vocabulary (inspect: 30 ms).
        pytest.param({"vocab": 151_936, "file_type_after_vocab": True}, marks=pytest.mark.slow),
        {"vocab": 60_000, "file_type_after_vocab": False, "file_type": 32, "tensors": 5},
        {"vocab": 1000, "merges": 0, "file_type": 1024, "name": ""},
    ],
)
def test_reader_agrees_with_gguf_reader(tmp_path: Path, kwargs: dict[str, object]) -> None:
    p = write_header_model(tmp_path / "m.gguf", **kwargs)  # type: ignore[arg-type]
    assert facts(p) == reference(p)


def test_tiny_llama_agrees_with_gguf_reader(tiny_llama: Path) -> None:
    got = facts(tiny_llama)
    assert got == reference(tiny_llama)
    assert got == {
        "architecture": "llama",
        "name": "exedra-tiny",
        "quant": "F32",
        "blocks": 2,
        "context": 256,
    }


def test_quant_table_matches_gguf_constants() -> None:
    expected = {
        int(t): ("F32" if t.name == "ALL_F32" else t.name.removeprefix("MOSTLY_"))
        for t in gguf.LlamaFileType
    }
    assert expected == FILE_TYPES


def test_unknown_and_retired_file_types_have_names() -> None:
    assert quant_name(None) == ""
    assert quant_name(4) == "Q4_1_SOME_F16"
    assert quant_name(999) == "FT999"


# -- hostile and broken files ------------------------------------------------------------


def header(version: int = 3, tensors: int = 0, kvs: bytes = b"", count: int | None = None) -> bytes:
    n = kvs.count(b"\x00KEY") if count is None else count
    return b"GGUF" + struct.pack("<IQQ", version, tensors, n) + kvs.replace(b"\x00KEY", b"")


def gstr(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def kv(key: bytes, vtype: int, payload: bytes) -> bytes:
    return b"\x00KEY" + gstr(key) + struct.pack("<I", vtype) + payload


ARCH = kv(b"general.architecture", 8, gstr(b"llama"))


def parse(data: bytes) -> object:
    return parse_gguf_header(io.BytesIO(data), len(data))


def err(data: bytes) -> str:
    r = parse(data)
    assert isinstance(r, Failure), r
    e = r.failure()
    assert isinstance(e, NotGGUF)
    return str(e)


def test_minimal_valid_header() -> None:
    r = parse(header(kvs=ARCH))
    assert isinstance(r, Success)
    assert r.unwrap().architecture == "llama"


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"", "too short"),
        (b"GGML" + b"\0" * 20, "bad magic"),
        (header(version=1, kvs=ARCH), "unsupported GGUF version 1"),
        (header(version=4, kvs=ARCH), "unsupported GGUF version 4"),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 1) + b"\0" * 32, "big-endian"),
        (header(count=2**63, kvs=ARCH), "cannot fit"),
        (header(tensors=2**63, kvs=ARCH), "cannot fit"),
        (header(kvs=kv(b"general.architecture", 8, struct.pack("<Q", 2**63))), "truncated"),
        (header(kvs=ARCH + kv(b"x", 8, struct.pack("<Q", 2**63 - 1))), "truncated"),
        (header(kvs=ARCH + kv(b"x", 13, b"\0" * 8)), "unknown value type 13"),
        (
            header(kvs=ARCH + kv(b"x", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 4, 1))),
            "nested arrays",
        ),
        (header(kvs=ARCH + kv(b"x", 9, struct.pack("<IQ", 99, 1))), "unknown element type 99"),
        (header(kvs=ARCH + kv(b"x", 9, struct.pack("<IQ", 4, 2**62))), "cannot fit"),
        (header(kvs=ARCH + kv(b"x", 9, struct.pack("<IQ", 8, 2**62))), "cannot fit"),
        (
            header(
                kvs=ARCH
                + kv(b"x", 9, struct.pack("<IQ", 8, 2) + gstr(b"a") + struct.pack("<Q", 2**40))
            ),
            "truncated",
        ),
        (header(kvs=kv(b"general.architecture", 4, b"\0\0\0\0")), "expected a string"),
        (header(kvs=kv(b"general.name", 8, gstr(b"x"))), "no general.architecture"),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1 << 20) + b"k" * 64,
            "truncated",
        ),
    ],
)
def test_hostile_headers_are_typed_errors(data: bytes, needle: str) -> None:
    assert needle in err(data)


def test_truncated_anywhere_is_a_typed_error(tiny_llama: Path) -> None:
    data = tiny_llama.read_bytes()
    # Every prefix that ends inside the metadata must fail cleanly; the facts sit in the
    # first few KiB, so the walk stops early and later prefixes succeed.
    end = next(n for n in range(24, len(data)) if isinstance(parse(data[:n]), Success))
    for n in range(0, end):
        assert isinstance(parse(data[:n]), Failure), n
    assert end < 20_000


def test_huge_declared_lengths_do_not_allocate() -> None:
    import tracemalloc

    data = header(kvs=ARCH + kv(b"x", 9, struct.pack("<IQ", 8, 3) + struct.pack("<Q", 2**62)))
    tracemalloc.start()
    err(data)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1 << 20


def test_directory_missing_and_fifo(tmp_path: Path) -> None:
    for p, kind, needle in [
        (tmp_path, ModelUnreadable, "is a directory"),
        (tmp_path / "nope.gguf", ModelUnreadable, "No such file"),
    ]:
        r = inspect(p)
        assert isinstance(r, Failure)
        assert isinstance(r.failure(), kind)
        assert str(p) in str(r.failure()) and needle in str(r.failure())
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    r = inspect(fifo)
    assert isinstance(r, Failure) and "not a regular file" in str(r.failure())


def test_file_without_read_permission(tiny_llama: Path) -> None:
    d = Path(tempfile.mkdtemp(prefix="exedra-perm-"))
    try:
        d.chmod(0o755)
        p = d / "locked.gguf"
        p.write_bytes(tiny_llama.read_bytes())
        p.chmod(0)
        # Root reads anything: as root, drop the effective uid for the call.
        if os.geteuid() == 0:
            os.seteuid(65534)
        try:
            r = inspect(p)
        finally:
            if os.getuid() == 0:
                os.seteuid(0)
        assert isinstance(r, Failure) and isinstance(r.failure(), ModelUnreadable)
        assert str(r.failure()) == f"{p}: Permission denied"
    finally:
        shutil.rmtree(d)


def test_not_gguf_names_the_path(tmp_path: Path) -> None:
    p = tmp_path / "weights.bin"
    p.write_bytes(b"\x00" * 100)
    r = inspect(p)
    assert isinstance(r, Failure) and isinstance(r.failure(), NotGGUF)
    assert str(r.failure()).startswith(f"{p}: not a GGUF file: bad magic")


def test_inspect_never_imports_numpy_or_gguf(tiny_llama: Path) -> None:
    code = (
        "import sys, exedra_engine as e; e.inspect(sys.argv[1]).unwrap(); "
        "bad = [m for m in ('numpy', 'gguf', 'trio') if m in sys.modules]; print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tiny_llama)], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_tiny_model_is_small_and_deterministic(tmp_path: Path) -> None:
    a = write_tiny_llama(tmp_path / "a.gguf").read_bytes()
    b = write_tiny_llama(tmp_path / "b.gguf").read_bytes()
    assert a == b
    assert len(a) < 300_000


def _array_then_file_type(lengths: list[int]) -> bytes:
    strings = b"".join(gstr(bytes([65 + i % 26]) * n) for i, n in enumerate(lengths))
    arr = kv(b"tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, len(lengths)) + strings)
    return header(kvs=ARCH + arr + kv(b"general.file_type", 4, struct.pack("<I", 15)))


@pytest.mark.parametrize(
    "lengths",
    [
        [5] * 2000,  # runs of short strings, skipped by the regex
        [0, 255, 256, 300, 1, 7] * 300,  # long strings break runs; empty strings are valid
        [300] * 600,  # no run ever matches
        [3] * 511 + [256] + [3] * 1024,  # a long string just after a full run
    ],
)
def test_long_string_arrays_are_skipped_exactly(lengths: list[int]) -> None:
    facts = parse(_array_then_file_type(lengths))
    assert isinstance(facts, Success), facts
    assert facts.unwrap().file_type == 15


def test_truncated_inside_a_long_string_array() -> None:
    data = _array_then_file_type([7] * 3000)
    # Past the point where the count alone rules the array out, so the walk itself must stop.
    for cut in (30_000, 40_000, 44_000, len(data) - 20):
        assert "truncated" in err(data[:cut])
