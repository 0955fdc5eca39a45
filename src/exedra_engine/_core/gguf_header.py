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

from exedra_engine._core.outcome import as_result
from exedra_engine._core.struct import Value
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
_FIXED: Final[dict[int, str]] = {
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
_SIZES: Final[dict[int, int]] = {t: struct.calcsize(f) for t, f in _FIXED.items()}
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
