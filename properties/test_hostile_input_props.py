"""Hostile YAML and GGUF, generated to reach what the drill of issue 14 found: tags that do not
fit their nodes, deep nesting, anchors and aliases, surrogates, floods of minimal GGUF entries.

Each property would have failed on 5d44a57: a KeyError for `!!str [x]`, a RecursionError past
~490 levels, a Config holding a lone surrogate that JSON cannot encode, a GGUF walk whose time
grew with the file instead of with what a header can hold.
"""

from __future__ import annotations

import io
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


# -- tensor layouts, fit-params output, hardware-file measurements -----------------------------

_ALIGN = 32


def _layout_header(tensors: list[tuple[int, int]]) -> bytes:
    """A GGUF v3 header of F32 tensors given as (elements, data offset)."""

    def s(x: str) -> bytes:
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    parts = [b"GGUF", struct.pack("<IQQ", 3, len(tensors), 1)]
    parts.append(s("general.architecture") + struct.pack("<I", 8) + s("llama"))
    for i, (n, off) in enumerate(tensors):
        parts.append(s(f"t{i}") + struct.pack("<IQIQ", 1, n, 0, off))
    out = b"".join(parts)
    return out + b"\0" * (-len(out) % _ALIGN)


@given(
    st.lists(st.integers(1, 64), min_size=1, max_size=12),
    st.lists(st.tuples(st.integers(0, 11), st.integers(-4, 4)), max_size=3),
    st.integers(0, 4096),
)
def test_an_accepted_tensor_layout_is_ggmls_in_order_back_to_back(
    elements: list[int], moves: list[tuple[int, int]], slack: int
) -> None:
    from exedra_engine._core.gguf.inventory_reader import parse_gguf_inventory

    # n * 16 floats = n * 64 bytes: every size a multiple of the alignment, so a move shifts
    # a whole tensor onto another's bytes, past them, or out of order.
    sizes = [n * 64 for n in elements]
    expected = [sum(sizes[:i]) for i in range(len(sizes))]
    offsets = list(expected)
    for i, by in moves:
        if i < len(offsets):
            offsets[i] = max(0, offsets[i] + by * _ALIGN)
    head = _layout_header([(n * 16, off) for n, off in zip(elements, offsets, strict=True)])
    data = head + b"\0" * (sum(sizes) + slack)
    r = parse_gguf_inventory(io.BytesIO(data), len(data))
    if offsets == expected:
        inv, _, _ = r.unwrap()
        assert sum(t.size for t in inv.tensors) <= len(data) - len(head)
    else:
        assert isinstance(r, Failure) and isinstance(r.failure(), NotGGUF)


_FIT_TEXT = st.text(
    st.sampled_from(list("Host CUDA0 Vulkan1 0123456789 \t\n\r\x00\x1b\u0661\uff11\u2028-_.")),
    max_size=120,
)


@given(_FIT_TEXT)
def test_fit_params_output_is_rows_of_ascii_or_a_typed_error(text: str) -> None:
    from exedra_engine._core.memory.fit_params import MAX_BYTES, rows_from_print
    from exedra_engine.errors import MeasureError

    try:
        devices, host = rows_from_print(text)
    except MeasureError as e:
        assert "\x00" not in str(e) and "\x1b" not in str(e)
        return
    names = [d.name for d in devices]
    assert len(set(names)) == len(names) and host.name == "Host"
    for row in (*devices, host):
        assert row.name.isascii() and row.name.isprintable() and " " not in row.name
        assert max(row.model, row.context, row.compute) <= MAX_BYTES


_ROW_NAME = st.one_of(st.sampled_from(["Host", "CUDA0", "CUDA1", "Vulkan0"]), st.text(max_size=70))
_BYTES = st.one_of(st.integers(0, 1 << 40), st.integers(-(1 << 63), (1 << 63) - 1))


@settings(max_examples=60)
@given(
    st.integers(-(1 << 63), (1 << 63) - 1),
    st.lists(st.tuples(_ROW_NAME, _BYTES), max_size=4),
    _ROW_NAME,
    st.text(max_size=20),
)
def test_a_hardware_files_measurement_is_bounded_or_refused_naming_it(
    ctx: int, devices: list[tuple[str, int]], host: str, model: str
) -> None:
    from exedra_engine import CPU, Hardware
    from exedra_engine._core.host.hardware_file import hardware_from_json
    from exedra_engine._core.memory.fit_params import MAX_BYTES, MAX_CTX, FitMeasurement, FitRow
    from exedra_engine.errors import HardwareFileError

    m = FitMeasurement(
        model=model,
        ctx=ctx,
        host=FitRow(name=host, model=1, context=1, compute=1),
        devices=tuple(FitRow(name=n, model=b, context=0, compute=0) for n, b in devices),
    )
    data = msgspec.json.encode(Hardware(cpu=CPU(threads=1), measurements=(m,)))
    try:
        hw = hardware_from_json(data, "h.json")
    except HardwareFileError as e:
        assert str(e).startswith("h.json: $.measurements[0].")
        return
    (got,) = hw.measurements
    assert 0 <= got.ctx <= MAX_CTX and got.model and got.host.name == "Host"
    names = [d.name for d in got.devices]
    assert len(set(names)) == len(names)
    assert all(0 <= d.model <= MAX_BYTES and d.name.isascii() for d in got.devices)


_PARTS = st.sampled_from(
    "var run home alice .ssh etc ssl private usr local lib srv models tmp data root docker "
    "secrets opt mnt".split()
)
_PATH = st.builds(lambda ps: "/" + "/".join([*ps, "m.gguf"]), st.lists(_PARTS, max_size=5))


@given(
    st.lists(_PATH, min_size=1, max_size=3, unique=True),
    st.lists(st.tuples(st.sampled_from(["/data", "/srv/models", "/opt/x"]), _PATH), max_size=2),
)
def test_emit_mounts_no_system_runtime_secret_or_home_tree(
    paths: list[str], links: list[tuple[str, str]]
) -> None:
    from exedra_engine._core.emit.mounts import mounts_for, never_whole, no_model_tree
    from exedra_engine._core.emit.options import EmitOptions
    from exedra_engine._core.values import ModelFile
    from exedra_engine.errors import EmitError

    # Links: a directory spelled one way that resolves into another tree (only the link is
    # named: what lies below it resolves through it).
    real = {d: target.rsplit("/", 1)[0] or "/" for d, target in links}
    files = [ModelFile(path=p) for p in paths]

    def resolved(p: str) -> str:
        for d, to in real.items():
            if p == d or p.startswith(d + "/"):
                return to + p[len(d) :]
        return p

    options = EmitOptions(real_paths=tuple(real.items()))
    try:
        mounts, _ = mounts_for(files, options)
    except EmitError:
        return
    for m in mounts:
        for spelled in {m.host, resolved(m.host)}:
            assert not no_model_tree(spelled), m
            if not m.is_file:
                assert not never_whole(spelled), m
    for p in paths:  # every file is seen by the container
        assert any(p == m.host or p.startswith(m.host + "/") for m in mounts)
