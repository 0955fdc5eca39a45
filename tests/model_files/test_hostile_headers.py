"""Hostile GGUF headers are errors, never answers: tensors that overlap or are out of order
are `NotGGUF` (as ggml's own reader says), a split set is capped as a whole (shards and
tensors), and every shard is read as the first is (a FIFO, a device, another file named
like a shard: `NotGGUF` naming it, never a plan without memory and exit 0)."""

from __future__ import annotations

import io
import os
import struct
import time
from pathlib import Path

import pytest

from exedra_engine._core.gguf.inventory_reader import (
    MAX_SHARDS,
    MAX_TENSORS,
    parse_gguf_inventory,
)
from exedra_engine._shell.inspect import read_inventory
from exedra_engine.errors import NotGGUF
from tests.conftest import Run

F32 = 0
_U32, _U16, _STR = 4, 2, 8


def _s(x: str) -> bytes:
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def header(tensors: list[tuple[str, list[int], int]], kv: dict[str, int] | None = None) -> bytes:
    """A GGUF v3 header of llama tensors (name, dims, data offset), every one F32, with
    `kv` integers (``split.*`` as u16, others u32)."""
    kv = {"llama.block_count": 1, "llama.attention.head_count": 1, **(kv or {})}
    body = _s("general.architecture") + struct.pack("<I", _STR) + _s("llama")
    for k, v in kv.items():
        t = _U16 if k.startswith("split.") else _U32
        body += _s(k) + struct.pack("<I", t) + struct.pack("<H" if t == _U16 else "<I", v)
    parts = [b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 1 + len(kv)) + body]
    for name, dims, off in tensors:
        parts.append(_s(name) + struct.pack("<I", len(dims)))
        parts.append(b"".join(struct.pack("<Q", d) for d in dims))
        parts.append(struct.pack("<IQ", F32, off))
    out = b"".join(parts)
    return out + b"\0" * (-len(out) % 32)


def write(path: Path, head: bytes, data: int) -> Path:
    """`head`, then `data` bytes of (sparse) tensor data."""
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + data)
    return path


def _fails(data: bytes, size: int | None = None) -> str:
    r = parse_gguf_inventory(io.BytesIO(data), size or len(data))
    err = r.failure()
    assert isinstance(err, NotGGUF), err
    return str(err)


MIB = 1 << 20


def test_tensors_overlapping_at_one_offset_are_not_gguf(tmp_path: Path) -> None:
    # Three 1 MiB tensors all at offset 0 in a file of 1.5 MiB of data: each fits, the
    # three together do not; before, the plan summed them into a need three times the file.
    head = header([(f"t{i}", [MIB // 4], 0) for i in range(3)])
    said = _fails(head + b"\0" * (MIB + MIB // 2))
    assert "'t1' is at data offset 0, expected 1048576" in said and "overlaps" in said


def test_tensors_out_of_order_are_not_gguf() -> None:
    head = header([("a", [32], 128), ("b", [32], 0)])
    said = _fails(head + b"\0" * 256)
    assert "'a' is at data offset 128, expected 0" in said and "gap" in said


def test_tensors_back_to_back_padded_to_the_alignment_are_read() -> None:
    # 33 floats = 132 bytes, padded to 160: the next tensor starts there.
    head = header([("a", [33], 0), ("b", [32], 160)])
    r = parse_gguf_inventory(io.BytesIO(head + b"\0" * 288), len(head) + 288)
    inv, _, _ = r.unwrap()
    assert [t.size for t in inv.tensors] == [132, 128]


def test_plan_of_overlapping_tensors_is_an_error_not_a_need(run: Run, tmp_path: Path) -> None:
    head = header([(f"t{i}", [MIB // 4], 0) for i in range(64)])
    m = write(tmp_path / "m.gguf", head, MIB + MIB // 2)
    r = run("plan", "--model", str(m), "--kind", "llama", "--no-config", "--no-port-check")
    assert r.code == 2, r.out
    assert "overlaps" in r.err and str(m) in r.err
    assert "needs" not in r.out + r.err


def _split_set(tmp_path: Path, count: int, tensors: int = 1) -> list[Path]:
    out = []
    for i in range(count):
        t = [(f"blk.{i}.t{j}", [32], 128 * j) for j in range(tensors)]
        head = header(t, {"split.no": i, "split.count": count})
        out.append(write(tmp_path / f"m-{i + 1:05d}-of-{count:05d}.gguf", head, 128 * tensors))
    return out


def test_a_split_set_reads_every_shard(tmp_path: Path) -> None:
    paths = _split_set(tmp_path, 3)
    inv = read_inventory(paths[0]).unwrap()
    assert inv.paths == tuple(str(p) for p in paths)


def test_a_split_set_of_more_shards_than_the_cap_is_refused_before_any_read(
    tmp_path: Path,
) -> None:
    first = tmp_path / f"m-00001-of-{MAX_SHARDS + 1:05d}.gguf"  # none of the others exist
    write(first, header([("t", [32], 0)], {"split.no": 0, "split.count": MAX_SHARDS + 1}), 128)
    err = read_inventory(first).failure()
    assert isinstance(err, NotGGUF)
    assert f"{MAX_SHARDS + 1} shards (at most {MAX_SHARDS})" in str(err)


def test_a_split_set_is_capped_in_tensors_as_a_whole(tmp_path: Path) -> None:
    # Each shard within the cap alone, the set past it: the second shard is refused, and the
    # read stops there (before, 20 shards x 65,536 tensors took 17.6 s).
    per = MAX_TENSORS // 2 + 1
    paths = _split_set(tmp_path, 3, tensors=per)
    started = time.monotonic()
    err = read_inventory(paths[0]).failure()
    took = time.monotonic() - started
    assert isinstance(err, NotGGUF)
    assert str(paths[1]) in str(err) and "with the shards before it" in str(err)
    assert took < 10, took


@pytest.mark.parametrize("shard", ["fifo", "dev-zero", "link-to-another-file", "garbage"])
def test_every_shard_is_checked_like_the_first(run: Run, tmp_path: Path, shard: str) -> None:
    paths = _split_set(tmp_path, 3)
    second = paths[1]
    second.unlink()
    if shard == "fifo":
        os.mkfifo(second)
    elif shard == "dev-zero":
        second.symlink_to("/dev/zero")
    elif shard == "link-to-another-file":
        other = tmp_path / "shadow"
        other.write_text("root:$6$salt$hash:19000:0:99999:7:::\n")
        second.symlink_to(other)
    else:
        second.write_bytes(b"GGUF" + b"\xff" * 60)
    started = time.monotonic()
    r = run("plan", "--model", str(paths[0]), "--kind", "llama", "--no-config",
            "--no-port-check")  # fmt: skip
    assert time.monotonic() - started < 10
    assert r.code == 2, r.out
    (line,) = r.err.splitlines()
    assert str(second) in line
    assert "root:" not in r.out + r.err
