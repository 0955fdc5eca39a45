"""Hostile YAML and GGUF, generated to reach what the drill of issue 14 found: tags that do not
fit their nodes, deep nesting, anchors and aliases, surrogates, floods of minimal GGUF entries.

Each property would have failed on 5d44a57: a KeyError for `!!str [x]`, a RecursionError past
~490 levels, a Config holding a lone surrogate that JSON cannot encode, a GGUF walk whose time
grew with the file instead of with what a header can hold.
"""

from __future__ import annotations

import os
import struct
import tempfile
import time
from pathlib import Path

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success

from exedra_engine import ConfigError, NotGGUF, inspect, load_config
from exedra_engine._core.config.parse import config_from_yaml

TAGS = st.sampled_from(
    ["", "!!str ", "!!null ", "!!map ", "!!seq ", "!!int ", "!!bool ", "!!binary ", "!x ", "! "]
)
TEXT = st.one_of(
    st.sampled_from(["a", "--ctx-size", "8192", "", "yes", "~", "0x1F", "1e3", "x: y"]),
    st.text(st.characters(codec="utf-8"), max_size=8),
)
ESCAPES = st.sampled_from(["\\ud800", "\\udfff", "\\x00", "\\u2028", "\\U0001F600", "\\n"])


def scalar() -> st.SearchStrategy[str]:
    plain = st.builds(lambda t, s: t + msgspec.json.encode(s).decode(), TAGS, TEXT)
    escaped = st.builds(lambda t, e: f'{t}"{e}"', TAGS, ESCAPES)
    return st.one_of(plain, escaped, st.sampled_from(["*a", "*b", "null", "[]", "{}"]))


def node(depth: int) -> st.SearchStrategy[str]:
    if depth <= 0:
        return scalar()
    sub = node(depth - 1)
    anchor = st.sampled_from(["", "&a ", "&b "])
    seq = st.builds(lambda t, a, xs: f"{t}{a}[{', '.join(xs)}]", TAGS, anchor,
                    st.lists(sub, max_size=4))  # fmt: skip
    key = st.sampled_from(["env", "engines", "models", "llama", "transcribe", "args", "A", "m"])
    mapping = st.builds(
        lambda t, a, kv: f"{t}{a}{{{', '.join(f'{k}: {v}' for k, v in kv)}}}",
        TAGS, anchor, st.lists(st.tuples(key, sub), max_size=4),
    )  # fmt: skip
    return st.one_of(scalar(), seq, mapping)


DOCUMENT = st.one_of(
    node(4),
    st.builds(lambda d: "[" * d + "]" * d, st.integers(1, 3000)),
    st.builds(lambda d, v: "env: " + "{a: " * d + v + "}" * d, st.integers(1, 1000), scalar()),
)


@given(DOCUMENT)
def test_any_document_is_a_config_or_a_located_error(text: str) -> None:
    r = config_from_yaml(text, "c.yaml")
    match r:
        case Success(cfg):
            # what loads can always be shown and saved: no surrogate survives
            assert msgspec.json.decode(msgspec.json.encode(cfg)) is not None
        case Failure(err):
            assert isinstance(err, ConfigError)
            assert str(err).startswith("c.yaml:"), err
            assert "\n" not in str(err)


def _gguf(count: int, body: bytes) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, count) + body


ENTRY = st.sampled_from(
    [
        struct.pack("<QIB", 0, 0, 0),  # empty key, u8: the 13-byte minimum
        struct.pack("<Q", 1) + b"k" + struct.pack("<IB", 7, 1),  # bool
        struct.pack("<Q", 13) + b"x.block_count" + struct.pack("<II", 4, 1),
        struct.pack("<Q", 1) + b"s" + struct.pack("<IQ", 8, 0),  # empty string
        struct.pack("<Q", 1) + b"a" + struct.pack("<IIQ", 9, 8, 0),  # empty string array
    ]
)


@settings(max_examples=40)
@given(
    st.lists(ENTRY, min_size=1, max_size=8),
    st.integers(1, 20_000),
    st.sampled_from([0, 3, 100_000, 50_000_000]),
    st.sampled_from([0, 1 << 20, 1 << 31]),
)
def test_gguf_floods_cost_time_bounded_per_byte(
    pattern: list[bytes], repeat: int, extra: int, sparse: int
) -> None:
    body = b"".join(pattern) * repeat
    count = len(pattern) * repeat + extra
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "flood.gguf"
        with p.open("wb") as f:
            f.write(_gguf(count, body))
            if sparse:
                f.truncate(sparse)
        t = time.perf_counter()
        r = inspect(p)
        took = time.perf_counter() - t
    # what a header holds bounds the walk, not the file's size (50M zero-filled entries of a
    # sparse file took 5d44a57 minutes): a generous 5 us per byte of real entries, plus a
    # fixed allowance for a loaded 2-core machine
    assert took < 0.2 + 5e-6 * len(body), (took, len(body), count)
    assert isinstance(r, Failure) and isinstance(r.failure(), NotGGUF)


# -- special files as config paths (D3) -------------------------------------------------------

ENTRY_KINDS = ("yaml", "fifo", "socket", "dev_zero", "dangling", "subdir", "upper", "hidden_fifo")


def _make(kind: str, d: Path, i: int) -> tuple[Path, bool]:
    """One directory entry; whether load_config must refuse it."""
    import socket as socket_mod

    name = f"{i:02d}-{kind}"
    if kind == "yaml":
        p = d / f"{name}.yaml"
        p.write_text(f"env: {{V{i}: x}}\n")
        return p, False
    if kind == "fifo":
        p = d / f"{name}.yaml"
        os.mkfifo(p)
        return p, True
    if kind == "socket":
        p = d / f"{name}.yaml"
        s = socket_mod.socket(socket_mod.AF_UNIX)
        s.bind(str(p))
        s.close()
        return p, True
    if kind == "dev_zero":
        p = d / f"{name}.yaml"
        p.symlink_to("/dev/zero")
        return p, True
    if kind == "dangling":
        p = d / f"{name}.yaml"
        p.symlink_to(d / "nowhere")
        return p, True
    if kind == "subdir":
        p = d / f"{name}.yaml"
        p.mkdir()
        return p, True
    if kind == "upper":
        p = d / f"{name}.YAML"
        p.write_text("env: {}\n")
        return p, True
    p = d / f".{name}.yaml"  # hidden: never read, whatever it is
    os.mkfifo(p)
    return p, False


# Named directly, a path is read as what it is: a FIFO, socket or device is refused, a
# directory is read as one, a dangling link names nothing (an empty config, as a missing path).
_REFUSED_DIRECT = frozenset({"fifo", "socket", "dev_zero", "hidden_fifo"})


@given(st.lists(st.sampled_from(ENTRY_KINDS), max_size=6), st.booleans())
def test_special_files_as_config_paths(kinds: list[str], direct: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        made = [(k, *_make(k, d, i)) for i, k in enumerate(kinds)]
        cases = (
            [(p, [p] if k in _REFUSED_DIRECT else []) for k, p, _ in made]
            if direct
            else [(d, [p for _, p, refused in made if refused])]
        )
        for target, bad in cases:
            t0 = time.monotonic()
            r = load_config(str(target))
            assert time.monotonic() - t0 < 2.0  # a FIFO or /dev/zero never hangs it
            if bad:
                assert isinstance(r, Failure), (target, kinds)
                err = str(r.failure())
                assert isinstance(r.failure(), ConfigError) and "\n" not in err
                assert any(str(p) in err for p in bad), (err, bad)
            else:
                assert isinstance(r, Success), (target, kinds, r)
