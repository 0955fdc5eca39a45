"""The facts planning needs from a GGUF header, read by a bounded streaming walk.

Pure: it never looks past the key/value section, so tensor data is never touched, and it stops
as soon as it has every field it needs. The byte reader and its bounds are in `cursor.py`.
"""

from __future__ import annotations

from typing import BinaryIO, Final

from exedra_engine._core.gguf.cursor import (
    INT_TYPES,
    MAX_KEPT_INTS,
    MAX_KEPT_STRING,
    MAX_KEY,
    STRING,
    Cursor,
    Malformed,
    Truncated,
    preamble,
    skip_value,
)
from exedra_engine._core.gguf.labels import CHAT_TEMPLATE, LABELS
from exedra_engine._core.outcome import boundary
from exedra_engine._core.struct import Value
from exedra_engine.errors import NotGGUF


class HeaderFacts(Value, frozen=True, kw_only=True):
    """What planning needs from a GGUF header."""

    version: int
    tensor_count: int
    architecture: str
    name: str = ""
    file_type: int | None = None
    blocks: int = 0
    context: int = 0
    chat_template: int = 0
    """Bytes of ``tokenizer.chat_template`` (its length only: the template is never read);
    0 when the header has none."""
    finetune: str = ""
    """``general.finetune`` (``it``, ``instruct``); "" when absent."""
    basename: str = ""
    """``general.basename``; "" when absent."""


_NAMES: Final = ("general.architecture", "general.name")


def read_gguf_header(src: BinaryIO, size: int) -> HeaderFacts:
    """Read the facts planning needs from a GGUF stream of `size` bytes.

    The error message names the offset and the field; the caller adds the path.
    """
    try:
        return _parse(Cursor(src, size))
    except (Truncated, Malformed) as e:
        raise NotGGUF(f"not a GGUF file: {e}") from None


parse_gguf_header = boundary(read_gguf_header)
"""`read_gguf_header` as a Result: ``Success(HeaderFacts)``, or ``Failure`` with its
`EngineError`."""


def _parse(cur: Cursor) -> HeaderFacts:
    version, tensor_count, kv_count = preamble(cur)
    strings, ints, overflow = _walk(cur, kv_count)
    arch = strings.get("general.architecture")
    if arch is None:
        raise Malformed("no general.architecture key")
    if overflow and not {f"{arch}.block_count", f"{arch}.context_length"} <= ints.keys():
        # The keys of the model's own architecture may be among those not kept: a zero
        # here would be a wrong answer, not a missing one.
        raise Malformed(
            f"more than {MAX_KEPT_INTS} *.block_count/*.context_length keys before "
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
        chat_template=ints.get(CHAT_TEMPLATE, 0),
        finetune=strings.get("general.finetune", ""),
        basename=strings.get("general.basename", ""),
    )


def _walk(cur: Cursor, kv_count: int) -> tuple[dict[str, str], dict[str, int], bool]:
    """The key/values planning needs, stopping once all are found; whether kept ints ran out."""
    strings: dict[str, str] = {}
    ints: dict[str, int] = {}
    overflow = False
    for i in range(kv_count):
        key = cur.string(MAX_KEY, f"key {i}")
        vtype = cur.u32(f"the type of {key!r}")
        if key in _NAMES:
            if vtype != STRING:
                raise Malformed(f"{key} has type {vtype}, expected a string")
            strings[key] = cur.string(MAX_KEPT_STRING, key)
        elif key in LABELS and vtype == STRING:
            strings[key] = cur.string(MAX_KEPT_STRING, key)
        elif key == CHAT_TEMPLATE and vtype == STRING:
            # Its presence and length are enough: the template is skipped unread.
            n = cur.u64(key)
            cur.skip(n, key)
            ints[key] = n
        elif vtype in INT_TYPES and _wanted_int(key, strings.get("general.architecture")):
            value = cur.fixed(vtype, key)
            if key in ints or len(ints) < MAX_KEPT_INTS:
                ints[key] = int(value)
            else:
                overflow = True
        else:
            skip_value(cur, vtype, key)
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
        # Whether a model has a chat template is known only once it is found: a header
        # without one is walked to its end (the vocabulary skipped, as the inventory does).
        and CHAT_TEMPLATE in ints
    )
