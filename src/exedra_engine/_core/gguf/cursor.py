"""The bounded byte reader under both GGUF walks: a forward-only cursor, the preamble, and
the skipping of values no one asked for.

Pure: it reads from any seekable binary stream it is handed (a file, or `io.BytesIO` in
tests). Arrays that are not needed are skipped — fixed-size ones with one seek, string arrays
by walking their length prefixes in a buffer. Every count and length is checked against the
bytes that remain before it is used, so a hostile header cannot make it allocate or loop
beyond the file's size.
"""

from __future__ import annotations

import functools
import re
import struct
from itertools import repeat
from typing import BinaryIO, Final

from exedra_engine._core.struct import freeze

MAGIC: Final = b"GGUF"
SUPPORTED_VERSIONS: Final = (2, 3)

# Reads start small (a header whose fields come first costs one 64 KiB read) and grow 8x up to
# 4 MiB while a long vocabulary is walked.
_FIRST_CHUNK: Final = 1 << 16
_MAX_CHUNK: Final = 1 << 22
MAX_KEY: Final = 1 << 16
MAX_KEPT_STRING: Final = 1 << 20
MAX_KEPT_INTS: Final = 256
# Real headers hold tens of key/values and vocabularies of at most a few hundred thousand
# tokens; these caps bound the walk of a hostile header (a flood of 13-byte entries over a
# sparse file) to well under a second, whatever the file's size.
MAX_KV: Final = 1 << 16
MAX_ARRAY_STRINGS: Final = 1 << 24

# GGUF value types (gguf.constants.GGUFValueType)
STRING: Final = 8
ARRAY: Final = 9
FIXED: Final[dict[int, str]] = freeze(
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
SIZES: Final[dict[int, int]] = freeze({t: struct.calcsize(f) for t, f in FIXED.items()})
INT_TYPES: Final = frozenset({0, 1, 2, 3, 4, 5, 10, 11})

U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")


class Truncated(Exception):
    def __init__(self, offset: int, what: str) -> None:
        super().__init__(f"truncated at byte {offset} while reading {what}")


class Malformed(Exception):
    pass


class Cursor:
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
            raise Truncated(self.size, what)
        rest = self.buf[self.pos :]
        self.base += self.pos
        self.pos = 0
        self.src.seek(self.base + len(rest))
        more = self.src.read(max(n, self.chunk) - len(rest))
        self.chunk = min(self.chunk * 8, _MAX_CHUNK)
        self.buf = rest + more
        if len(self.buf) < n:  # the file shrank under us
            raise Truncated(self.base + len(self.buf), what)

    def u32(self, what: str) -> int:
        self._fill(4, what)
        (v,) = U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def u64(self, what: str) -> int:
        self._fill(8, what)
        (v,) = U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return int(v)

    def fixed(self, vtype: int, what: str) -> int | float | bool:
        n = SIZES[vtype]
        self._fill(n, what)
        (v,) = struct.unpack_from(FIXED[vtype], self.buf, self.pos)
        self.pos += n
        return v  # type: ignore[no-any-return]

    def string(self, limit: int, what: str) -> str:
        n = self.u64(what)
        if n > limit:
            if n > self.remaining():
                raise Truncated(self.size, what)
            raise Malformed(f"{what} is {n} bytes long (at most {limit} expected)")
        self._fill(n, what)
        s = self.buf[self.pos : self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s

    def skip(self, n: int, what: str) -> None:
        if n > self.remaining():
            raise Truncated(self.size, what)
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
        unpack = U64.unpack_from
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
                    raise Truncated(self.size, what)
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


def preamble(cur: Cursor) -> tuple[int, int, int]:
    """Magic, version and the two counts, each checked against what the file can hold."""
    if cur.size < 4:
        raise Malformed(f"{cur.size} bytes is too short for a GGUF header")
    cur._fill(4, "the magic")
    magic = cur.buf[:4]
    cur.pos = 4
    if magic != MAGIC:
        raise Malformed(f"bad magic {magic!r} (expected {MAGIC!r})")
    version = cur.u32("the version")
    if version not in SUPPORTED_VERSIONS:
        if version & 0xFFFF == 0 and (version >> 24) in SUPPORTED_VERSIONS:
            raise Malformed("big-endian GGUF is not supported")
        raise Malformed(f"unsupported GGUF version {version} (supported: 2, 3)")
    tensor_count = cur.u64("the tensor count")
    kv_count = cur.u64("the key/value count")
    # Each key/value needs at least a length prefix, a type and one value byte (keys may be
    # empty).
    if kv_count > cur.remaining() // 13:
        raise Malformed(f"key/value count {kv_count} cannot fit in {cur.size} bytes")
    if kv_count > MAX_KV:
        raise Malformed(
            f"key/value count {kv_count} is more than any model header holds (at most {MAX_KV})"
        )
    if tensor_count > cur.remaining() // 24:
        raise Malformed(f"tensor count {tensor_count} cannot fit in {cur.size} bytes")
    return version, tensor_count, kv_count


def skip_value(cur: Cursor, vtype: int, key: str) -> None:
    if vtype in SIZES:
        cur.skip(SIZES[vtype], key)
    elif vtype == STRING:
        n = cur.u64(key)
        cur.skip(n, key)
    elif vtype == ARRAY:
        etype = cur.u32(f"the element type of {key!r}")
        count = cur.u64(f"the length of {key!r}")
        if etype in SIZES:
            width = SIZES[etype]
            if count > cur.remaining() // width:
                raise Malformed(f"array {key!r} of {count} elements cannot fit in the file")
            cur.skip(count * width, key)
        elif etype == STRING:
            if count > cur.remaining() // 8:
                raise Malformed(f"array {key!r} of {count} strings cannot fit in the file")
            if count > MAX_ARRAY_STRINGS:
                raise Malformed(
                    f"array {key!r} of {count} strings is longer than any model's "
                    f"(at most {MAX_ARRAY_STRINGS})"
                )
            cur.skip_strings(count, key)
        elif etype == ARRAY:
            raise Malformed(f"nested arrays are not supported (key {key!r})")
        else:
            raise Malformed(f"unknown element type {etype} in array {key!r}")
    else:
        raise Malformed(f"unknown value type {vtype} for key {key!r}")
