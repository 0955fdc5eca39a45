"""A streaming, bounded reader of the GGUF metadata section.

Pure: it reads from any seekable binary stream it is handed (a file, or `io.BytesIO` in
tests) and never looks past the key/value section, so tensor data is never touched.
Arrays it does not need are skipped — fixed-size ones with one seek, string arrays by
walking their length prefixes in a buffer — and it stops as soon as it has every field
it needs. Every count and length is checked against the bytes that remain before it is
used, so a hostile header cannot make it allocate or loop beyond the file's size.
"""

from __future__ import annotations

import functools
import re
import struct
from itertools import repeat
from typing import TYPE_CHECKING, BinaryIO, Final

from exedra_engine._core.gguf.inventory import GGML_TYPES, ModelInventory, TensorInfo
from exedra_engine._core.outcome import as_result
from exedra_engine._core.struct import Value, freeze
from exedra_engine.errors import EngineError, NotGGUF

if TYPE_CHECKING:
    from returns.result import Result

MAGIC: Final = b"GGUF"
SUPPORTED_VERSIONS: Final = (2, 3)

# Reads start small (a header whose fields come first costs one 64 KiB read) and grow 8x up to
# 4 MiB while a long vocabulary is walked.
_FIRST_CHUNK: Final = 1 << 16
_MAX_CHUNK: Final = 1 << 22
_MAX_KEY: Final = 1 << 16
_MAX_KEPT_STRING: Final = 1 << 20
_MAX_KEPT_INTS: Final = 256
# Real headers hold tens of key/values and vocabularies of at most a few hundred thousand
# tokens; these caps bound the walk of a hostile header (a flood of 13-byte entries over a
# sparse file) to well under a second, whatever the file's size.
MAX_KV: Final = 1 << 16
MAX_ARRAY_STRINGS: Final = 1 << 24

# GGUF value types (gguf.constants.GGUFValueType)
_STRING: Final = 8
_ARRAY: Final = 9
_FIXED: Final[dict[int, str]] = freeze(
    {
        0: "<B",
        1: "<b",
        2: "<H",
        3: "<h",
        4: "<I",
        5: "<i",
        6: "<f",
        7: "<?",
        10: "<Q",
        11: "<q",
        12: "<d",
    }
)
_SIZES: Final[dict[int, int]] = freeze({t: struct.calcsize(f) for t, f in _FIXED.items()})
_INT_TYPES: Final = frozenset({0, 1, 2, 3, 4, 5, 10, 11})

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class HeaderFacts(Value, frozen=True, kw_only=True):
    """What planning needs from a GGUF header."""

    version: int
    tensor_count: int
    architecture: str
    name: str = ""
    file_type: int | None = None
    blocks: int = 0
    context: int = 0


class _Truncated(Exception):
    def __init__(self, offset: int, what: str) -> None:
        super().__init__(f"truncated at byte {offset} while reading {what}")


class _Malformed(Exception):
    pass


class _Cursor:
    """A forward-only window over the stream; `base` is the file offset of ``buf[0]``."""

    __slots__ = ("base", "buf", "chunk", "pos", "size", "src")

    def __init__(self, src: BinaryIO, size: int) -> None:
        self.src = src
        self.size = size
        self.buf = b""
        self.pos = 0
        self.base = 0
        self.chunk = _FIRST_CHUNK

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def remaining(self) -> int:
        return self.size - self.offset

    def _fill(self, n: int, what: str) -> None:
        if self.pos + n <= len(self.buf):
            return
        if n > self.remaining():
            raise _Truncated(self.size, what)
        rest = self.buf[self.pos :]
        self.base += self.pos
        self.pos = 0
        self.src.seek(self.base + len(rest))
        more = self.src.read(max(n, self.chunk) - len(rest))
        self.chunk = min(self.chunk * 8, _MAX_CHUNK)
        self.buf = rest + more
        if len(self.buf) < n:  # the file shrank under us
            raise _Truncated(self.base + len(self.buf), what)

    def u32(self, what: str) -> int:
        self._fill(4, what)
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def u64(self, what: str) -> int:
        self._fill(8, what)
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return int(v)

    def fixed(self, vtype: int, what: str) -> int | float | bool:
        n = _SIZES[vtype]
        self._fill(n, what)
        (v,) = struct.unpack_from(_FIXED[vtype], self.buf, self.pos)
        self.pos += n
        return v  # type: ignore[no-any-return]

    def string(self, limit: int, what: str) -> str:
        n = self.u64(what)
        if n > limit:
            if n > self.remaining():
                raise _Truncated(self.size, what)
            raise _Malformed(f"{what} is {n} bytes long (at most {limit} expected)")
        self._fill(n, what)
        s = self.buf[self.pos : self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s

    def skip(self, n: int, what: str) -> None:
        if n > self.remaining():
            raise _Truncated(self.size, what)
        if self.pos + n <= len(self.buf):
            self.pos += n
            return
        self.base += self.pos + n
        self.pos = 0
        self.buf = b""

    def skip_strings(self, count: int, what: str) -> None:
        # The hot loop for 150k-token vocabularies. Inside the buffer, runs of _RUN strings
        # shorter than 256 bytes (nearly every token and merge) are skipped by one regex
        # match in C (see _short_strings); anything else — a long string, the buffer's end —
        # is walked one length prefix at a time. A string that runs past the buffer becomes a
        # seek; lengths are checked against the file size whenever the walk leaves the buffer,
        # so a hostile length allocates nothing.
        unpack = _U64.unpack_from
        run = _short_strings() if count >= _RUN else None
        while count:
            self._fill(8, what)
            buf, pos = self.buf, self.pos
            end = len(buf)
            while count and pos + 8 <= end:
                if run is not None and count >= _RUN and (m := run.match(buf, pos)):
                    pos = m.end()
                    count -= _RUN
                    continue
                for _ in repeat(None, min(count, _RUN)):
                    if pos + 8 > end:
                        break
                    (n,) = unpack(buf, pos)
                    pos += 8 + n
                    count -= 1
                    if pos > end:
                        break
            if pos > end:
                target = self.base + pos
                if target > self.size:
                    raise _Truncated(self.size, what)
                self.base, self.pos, self.buf = target, 0, b""
            else:
                self.pos = pos


_RUN: Final = 512


@functools.cache
def _short_strings() -> re.Pattern[bytes]:
    """Matches exactly _RUN consecutive GGUF strings of fewer than 256 bytes each.

    A string is a little-endian u64 length and that many bytes; below 256 the length is
    one byte L and seven zero bytes, so one alternation branch per L ("L, 7 zeros, L bytes")
    recognises it. Compiled on first use (~3 ms), when a long string array is first skipped.
    """
    branches = b"|".join(
        re.escape(bytes([n]) + b"\0" * 7) + (b".{%d}" % n if n else b"") for n in range(256)
    )
    # Possessive: a run that fails is retried string by string, never backtracked into.
    return re.compile(b"(?s)(?:" + branches + b"){%d}+" % _RUN)


def parse_gguf_header(src: BinaryIO, size: int) -> Result[HeaderFacts, EngineError]:
    """Read the facts planning needs from a GGUF stream of `size` bytes.

    The error message names the offset and the field; the caller adds the path.
    """
    return as_result(read_gguf_header, src, size)


def read_gguf_header(src: BinaryIO, size: int) -> HeaderFacts:
    """`parse_gguf_header` for the library's own callers: raises `NotGGUF`."""
    try:
        return _parse(_Cursor(src, size))
    except (_Truncated, _Malformed) as e:
        raise NotGGUF(f"not a GGUF file: {e}") from None


def _parse(cur: _Cursor) -> HeaderFacts:
    version, tensor_count, kv_count = _preamble(cur)
    strings, ints, overflow = _walk(cur, kv_count)
    arch = strings.get("general.architecture")
    if arch is None:
        raise _Malformed("no general.architecture key")
    if overflow and not {f"{arch}.block_count", f"{arch}.context_length"} <= ints.keys():
        # The keys of the model's own architecture may be among those not kept: a zero
        # here would be a wrong answer, not a missing one.
        raise _Malformed(
            f"more than {_MAX_KEPT_INTS} *.block_count/*.context_length keys before "
            "general.architecture"
        )
    return HeaderFacts(
        version=version,
        tensor_count=tensor_count,
        architecture=arch,
        name=strings.get("general.name", ""),
        file_type=ints.get("general.file_type"),
        blocks=max(ints.get(f"{arch}.block_count", 0), 0),
        context=max(ints.get(f"{arch}.context_length", 0), 0),
    )


def _preamble(cur: _Cursor) -> tuple[int, int, int]:
    """Magic, version and the two counts, each checked against what the file can hold."""
    if cur.size < 4:
        raise _Malformed(f"{cur.size} bytes is too short for a GGUF header")
    cur._fill(4, "the magic")
    magic = cur.buf[:4]
    cur.pos = 4
    if magic != MAGIC:
        raise _Malformed(f"bad magic {magic!r} (expected {MAGIC!r})")
    version = cur.u32("the version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and (version >> 24) in SUPPORTED_VERSIONS:
            raise _Malformed("big-endian GGUF is not supported")
        raise _Malformed(f"unsupported GGUF version {version} (supported: 2, 3)")
    tensor_count = cur.u64("the tensor count")
    kv_count = cur.u64("the key/value count")
    # Each key/value needs at least a length prefix, a type and one value byte (keys may be
    # empty).
    if kv_count > cur.remaining() // 13:
        raise _Malformed(f"key/value count {kv_count} cannot fit in {cur.size} bytes")
    if kv_count > MAX_KV:
        raise _Malformed(
            f"key/value count {kv_count} is more than any model header holds (at most {MAX_KV})"
        )
    if tensor_count > cur.remaining() // 24:
        raise _Malformed(f"tensor count {tensor_count} cannot fit in {cur.size} bytes")
    return version, tensor_count, kv_count


def _walk(cur: _Cursor, kv_count: int) -> tuple[dict[str, str], dict[str, int], bool]:
    """The key/values planning needs, stopping once all are found; whether kept ints ran out."""
    strings: dict[str, str] = {}
    ints: dict[str, int] = {}
    overflow = False
    for i in range(kv_count):
        key = cur.string(_MAX_KEY, f"key {i}")
        vtype = cur.u32(f"the type of {key!r}")
        if key in ("general.architecture", "general.name"):
            if vtype != _STRING:
                raise _Malformed(f"{key} has type {vtype}, expected a string")
            strings[key] = cur.string(_MAX_KEPT_STRING, key)
        elif vtype in _INT_TYPES and _wanted_int(key, strings.get("general.architecture")):
            value = cur.fixed(vtype, key)
            if key in ints or len(ints) < _MAX_KEPT_INTS:
                ints[key] = int(value)
            else:
                overflow = True
        else:
            _skip_value(cur, vtype, key)
        if _complete(strings, ints):
            break
    return strings, ints, overflow


def _wanted_int(key: str, arch: str | None) -> bool:
    if key == "general.file_type":
        return True
    if arch is not None:  # once the architecture is known, only its own keys count
        return key in (f"{arch}.block_count", f"{arch}.context_length")
    return key.endswith((".block_count", ".context_length"))


def _complete(strings: dict[str, str], ints: dict[str, int]) -> bool:
    arch = strings.get("general.architecture")
    return (
        arch is not None
        and "general.name" in strings
        and "general.file_type" in ints
        and f"{arch}.block_count" in ints
        and f"{arch}.context_length" in ints
    )


def _skip_value(cur: _Cursor, vtype: int, key: str) -> None:
    if vtype in _SIZES:
        cur.skip(_SIZES[vtype], key)
    elif vtype == _STRING:
        n = cur.u64(key)
        cur.skip(n, key)
    elif vtype == _ARRAY:
        etype = cur.u32(f"the element type of {key!r}")
        count = cur.u64(f"the length of {key!r}")
        if etype in _SIZES:
            width = _SIZES[etype]
            if count > cur.remaining() // width:
                raise _Malformed(f"array {key!r} of {count} elements cannot fit in the file")
            cur.skip(count * width, key)
        elif etype == _STRING:
            if count > cur.remaining() // 8:
                raise _Malformed(f"array {key!r} of {count} strings cannot fit in the file")
            if count > MAX_ARRAY_STRINGS:
                raise _Malformed(
                    f"array {key!r} of {count} strings is longer than any model's "
                    f"(at most {MAX_ARRAY_STRINGS})"
                )
            cur.skip_strings(count, key)
        elif etype == _ARRAY:
            raise _Malformed(f"nested arrays are not supported (key {key!r})")
        else:
            raise _Malformed(f"unknown element type {etype} in array {key!r}")
    else:
        raise _Malformed(f"unknown value type {vtype} for key {key!r}")


# --- The tensor inventory -------------------------------------------------------------------
# `parse_gguf_inventory` reads the whole key/value section (the tensor infos follow it) and
# then every tensor info. Bounds, beyond the ones above: llama.cpp's own (at most 4 dimensions,
# 64-byte names are its limit; we allow longer but bounded ones), a tensor count no real model
# approaches, element counts that fit an int64 as ggml requires, known ggml types only, and
# every tensor's bytes inside the file, so no product downstream can exceed the file's size.

MAX_TENSORS: Final = 1 << 16
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


def parse_gguf_inventory(
    src: BinaryIO, size: int, path: str = ""
) -> Result[tuple[ModelInventory, int, int], EngineError]:
    """Read the tensor inventory of one GGUF file of `size` bytes: the inventory, and the
    file's ``split.count`` and ``split.no`` (0, 0 for an unsplit model).

    Bounded like `parse_gguf_header`, and reads every key/value (the tensor infos follow
    them) but never the tensor data.
    """
    return as_result(read_gguf_inventory, src, size, path)


def read_gguf_inventory(
    src: BinaryIO, size: int, path: str = ""
) -> tuple[ModelInventory, int, int]:
    """`parse_gguf_inventory` for the library's own callers: raises `NotGGUF`."""
    try:
        return _parse_inventory(_Cursor(src, size), path)
    except (_Truncated, _Malformed) as e:
        raise NotGGUF(f"not a GGUF file: {e}") from None


_Kept = dict[str, "int | tuple[int, ...]"]


def _parse_inventory(cur: _Cursor, path: str) -> tuple[ModelInventory, int, int]:
    _, tensor_count, kv_count = _preamble(cur)
    if tensor_count > MAX_TENSORS:
        raise _Malformed(
            f"tensor count {tensor_count} is more than any model holds (at most {MAX_TENSORS})"
        )
    strings, kept, vocab_tokens = _walk_all(cur, kv_count)
    arch = strings.get("general.architecture")
    if arch is None:
        raise _Malformed("no general.architecture key")
    alignment = _scalar(kept, "general.alignment", 32)
    if alignment <= 0 or alignment & (alignment - 1) or alignment > 1 << 20:
        raise _Malformed(f"general.alignment {alignment} is not a power of two up to 1 MiB")
    tensors = _tensor_infos(cur, tensor_count, alignment)
    inv = _inventory(
        arch,
        name=strings.get("general.name", ""),
        kept=kept,
        vocab_tokens=vocab_tokens,
        tensors=tensors,
        path=path,
        size=cur.size,
    )
    return inv, _scalar(kept, "split.count", 0), _scalar(kept, "split.no", 0)


def _walk_all(cur: _Cursor, kv_count: int) -> tuple[dict[str, str], _Kept, int]:
    strings: dict[str, str] = {}
    kept: _Kept = {}
    vocab_tokens = 0
    for i in range(kv_count):
        key = cur.string(_MAX_KEY, f"key {i}")
        vtype = cur.u32(f"the type of {key!r}")
        if key in ("general.architecture", "general.name"):
            if vtype != _STRING:
                raise _Malformed(f"{key} has type {vtype}, expected a string")
            strings[key] = cur.string(_MAX_KEPT_STRING, key)
            continue
        wanted = key in _GENERAL_INTS or _arch_key(key, strings.get("general.architecture"))
        if wanted and (key in kept or len(kept) < _MAX_KEPT_INTS):
            if vtype in _INT_TYPES or vtype == _BOOL:
                kept[key] = int(cur.fixed(vtype, key))
                continue
            if vtype == _ARRAY:
                kept[key] = _int_array(cur, key)
                continue
        if key == _TOKENS and vtype == _ARRAY:
            vocab_tokens = _skip_vocabulary(cur, key)
            continue
        _skip_value(cur, vtype, key)
    return strings, kept, vocab_tokens


def _skip_vocabulary(cur: _Cursor, key: str) -> int:
    """Skip the vocabulary's strings, unread: their count."""
    etype = cur.u32(f"the element type of {key!r}")
    count = cur.u64(f"the length of {key!r}")
    if etype != _STRING:
        raise _Malformed(f"{key} has element type {etype}, expected strings")
    if count > cur.remaining() // 8 or count > MAX_ARRAY_STRINGS:
        raise _Malformed(f"array {key!r} of {count} strings cannot be a vocabulary")
    cur.skip_strings(count, key)
    return count


def _arch_key(key: str, arch: str | None) -> bool:
    if arch is not None:
        return key.startswith(arch + ".") and key[len(arch) + 1 :] in _ARCH_SUFFIXES
    # Before the architecture is known every architecture's keys are kept (bounded by
    # _MAX_KEPT_INTS); names of architectures hold no dot.
    return key.partition(".")[2] in _ARCH_SUFFIXES


def _int_array(cur: _Cursor, key: str) -> tuple[int, ...]:
    etype = cur.u32(f"the element type of {key!r}")
    count = cur.u64(f"the length of {key!r}")
    if etype not in _INT_TYPES and etype != _BOOL:
        raise _Malformed(f"{key} is an array of type {etype}, expected integers")
    width = _SIZES[etype]
    if count > cur.remaining() // width:
        raise _Malformed(f"array {key!r} of {count} elements cannot fit in the file")
    if count > _MAX_LAYER_ARRAY:
        raise _Malformed(f"array {key!r} of {count} elements is longer than any model's layers")
    cur._fill(count * width, key)
    fmt = f"<{count}{_FIXED[etype][1]}"
    values = struct.unpack_from(fmt, cur.buf, cur.pos)
    cur.pos += count * width
    return tuple(int(v) for v in values)


_DIMS_TAIL: Final = freeze({n: struct.Struct(f"<{n}QIQ") for n in range(1, MAX_DIMS + 1)})


def _tensor_infos(cur: _Cursor, count: int, alignment: int) -> tuple[TensorInfo, ...]:
    # The hot loop of a large model's header: the buffer is read with precompiled structs,
    # and error messages are formatted only when one is raised.
    if count > cur.remaining() // 24:
        raise _Malformed(f"tensor count {count} cannot fit in the file")
    what = "the tensor infos"
    u64, u32 = _U64.unpack_from, _U32.unpack_from
    raw: list[tuple[str, int, tuple[int, ...], int, int]] = []
    for i in range(count):
        cur._fill(8, what)
        (n,) = u64(cur.buf, cur.pos)
        if n > _MAX_TENSOR_NAME:
            if n > cur.remaining():
                raise _Truncated(cur.size, what)
            raise _Malformed(f"the name of tensor {i} is {n} bytes long")
        cur._fill(12 + n, what)
        buf, pos = cur.buf, cur.pos
        name = buf[pos + 8 : pos + 8 + n].decode("utf-8", errors="replace")
        (n_dims,) = u32(buf, pos + 8 + n)
        if not 1 <= n_dims <= MAX_DIMS:
            raise _Malformed(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS})")
        tail = _DIMS_TAIL[n_dims]
        cur._fill(12 + n + tail.size, what)
        buf, pos = cur.buf, cur.pos
        *dims, ttype, offset = tail.unpack_from(buf, pos + 12 + n)
        cur.pos = pos + 12 + n + tail.size
        shape = tuple(dims)
        nbytes = _tensor_bytes(name, shape, ttype)
        if offset % alignment:
            raise _Malformed(f"tensor {name!r}: offset {offset} is not {alignment}-aligned")
        raw.append((name, ttype, shape, nbytes, offset))
    data = -(-cur.offset // alignment) * alignment
    room = cur.size - data
    out = []
    for name, ttype, shape, nbytes, offset in raw:
        if offset > room or nbytes > room - offset:
            raise _Malformed(
                f"tensor {name!r} ({nbytes} bytes at {offset}) lies past the file's end"
            )
        out.append(TensorInfo(name=name, type=ttype, shape=shape, size=nbytes))
    return tuple(out)


def _tensor_bytes(name: str, shape: tuple[int, ...], ttype: int) -> int:
    """The bytes of a tensor of `shape` and ggml type `ttype`, raising `_Malformed` for a
    shape that overflows or is not whole blocks, or an unknown type."""
    elements = 1
    for d in shape:
        if d > _INT64_MAX or (d and elements > _INT64_MAX // d):
            raise _Malformed(f"tensor {name!r} of shape {shape} overflows an int64")
        elements *= d
    traits = GGML_TYPES.get(ttype)
    if traits is None:
        raise _Malformed(f"tensor {name!r} has unknown ggml type {ttype}")
    tname, blk, bsize = traits
    if shape[0] % blk:
        raise _Malformed(f"tensor {name!r}: row of {shape[0]} is not whole {tname} blocks")
    return elements // blk * bsize


def _scalar(kept: _Kept, key: str, default: int) -> int:
    v = kept.get(key, default)
    if isinstance(v, tuple):
        raise _Malformed(f"{key} is an array, expected one number")
    return v


def _inventory(
    arch: str,
    *,
    name: str,
    kept: _Kept,
    vocab_tokens: int,
    tensors: tuple[TensorInfo, ...],
    path: str,
    size: int,
) -> ModelInventory:
    def num(suffix: str) -> int:
        v = _scalar(kept, f"{arch}.{suffix}", 0)
        if v < 0 or v > _INT32_MAX:
            raise _Malformed(f"{arch}.{suffix} is {v} (0 to {_INT32_MAX} expected)")
        return v

    blocks = num("block_count")
    if blocks > MAX_BLOCKS:
        raise _Malformed(
            f"{arch}.block_count {blocks} is more than any model has (at most {MAX_BLOCKS})"
        )

    def per_layer(suffix: str) -> tuple[int, ...]:
        v = kept.get(f"{arch}.{suffix}", 0)
        vals = v if isinstance(v, tuple) else (v,) * blocks
        if any(x < 0 or x > _INT32_MAX for x in vals):
            raise _Malformed(f"{arch}.{suffix} holds a value outside 0-{_INT32_MAX}")
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
        name=name,
        file_type=_scalar(kept, "general.file_type", -1) if "general.file_type" in kept else None,
        tensors=tensors,
        blocks=blocks,
        context=num("context_length"),
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
