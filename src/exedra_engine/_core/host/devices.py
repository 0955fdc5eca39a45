"""The devices an executor sees, as it lists them: ``llama-server --list-devices``, read as
hostile input. Pure: the shell runs the binary (`exedra_engine._shell.local.device_list`).

llama.cpp prints (common/arg.cpp, ``common_print_available_devices``) every backend device
that is not the CPU, after loading every backend plugin it finds::

    Available devices:
      Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)

or ``  (none)`` under the header. The line is ``printf("  %s: %s (%zu MiB, %zu MiB free)\\n",
name, description, total / MiB, free / MiB)``: the description may hold parentheses and
colons of its own, so a line is read from both ends. A binary is not trusted to keep to the
format: the text, its lines, each name and description and each size are bounded, a device
listed twice or with more free memory than it has is refused, and the error says which line.

Not every listed device takes layers: llama.cpp lists its accelerator devices (BLAS, zDNN,
ZenDNN: type ``ACCEL``, which speed up the CPU's work on host memory) beside the GPUs. Only
the others are places a model's layers go (`offloads`).
"""

from __future__ import annotations

import re
from typing import Final

from exedra_engine._core.struct import Value
from exedra_engine.errors import EngineError

_MIB: Final = 1 << 20

MAX_DEVICE_LIST: Final = 64 << 10
"""Characters of a device list read (a real one is a few hundred)."""
MAX_DEVICES: Final = 64
"""Devices one list may name (llama.cpp's own limit per backend is 16)."""
MAX_DEVICE_MIB: Final = 1 << 24
"""The largest size believed, in MiB (16 TiB: no single device comes near it)."""
MAX_DEVICE_BYTES: Final = MAX_DEVICE_MIB << 20
MAX_DESCRIPTION: Final = 256
MAX_DEVICE_LINE: Final = 512
"""Characters of one device line (name, description and sizes)."""

BACKEND_DEVICE_NAME: Final = re.compile(r"[A-Za-z][\w.:\[\]@/+-]{0,63}")
"""A backend device name: ``Vulkan0``, ``CUDA0``, ``RPC[host:port]``..."""

HEADER: Final = "Available devices:"
NONE: Final = "(none)"
_LINE: Final = re.compile(
    r"  (?P<name>[A-Za-z][\w.:\[\]@/+-]{0,63}?): (?P<desc>.*) "
    r"\((?P<total>\d{1,12}) MiB, (?P<free>\d{1,12}) MiB free\)"
)

_ACCELERATORS: Final = frozenset({"BLAS", "ZDNN", "ZENDNN"})
"""llama.cpp's ``GGML_BACKEND_DEVICE_TYPE_ACCEL`` devices (ggml-blas, ggml-zdnn,
ggml-zendnn), upper-cased: listed, but no layer is placed on them."""


class DeviceListError(EngineError):
    """An executor's device list (``--list-devices``) that cannot be believed: not the
    format llama.cpp prints, or sizes, names or counts past what any device has."""


class Device(Value, frozen=True, kw_only=True):
    """One device as the executor lists it (``llama-server --list-devices``)."""

    name: str
    """The backend's device name, as llama.cpp prints it and takes it (``--device``):
    ``Vulkan0``, ``CUDA0``, ``ROCm0``..."""
    description: str
    """What the backend says the device is (``NVIDIA GeForce RTX 4090``,
    ``llvmpipe (LLVM 15.0.6, 256 bits)``)."""
    total: int
    """Bytes of memory the backend reports for it (whole MiB, as listed)."""
    free: int
    """Bytes of it free when listed (whole MiB, as listed)."""


def offloads(device: Device) -> bool:
    """Whether llama.cpp places layers on `device`: any device but its accelerators (BLAS,
    zDNN, ZenDNN), which work on host memory."""
    return device.name.upper() not in _ACCELERATORS


def parse_device_list(text: str) -> tuple[Device, ...]:
    """The devices of ``--list-devices`` output `text` (what follows the ``Available
    devices:`` line; lines before it, a backend's log, are skipped). Raises
    `DeviceListError`, naming the line, for anything llama.cpp does not print."""
    if len(text) > MAX_DEVICE_LIST:
        raise DeviceListError(
            f"{len(text)} characters: more than {MAX_DEVICE_LIST}, not a device list"
        )
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if line.rstrip() == HEADER]
    if not at:
        raise DeviceListError(f"no {HEADER!r} line: not llama.cpp's device list")
    if len(at) > 1:
        raise DeviceListError(f"{HEADER!r} appears {len(at)} times (lines {at[0] + 1}, ...)")
    body = [(i + 1, line) for i, line in enumerate(lines) if i > at[0] and line.strip()]
    if len(body) == 1 and body[0][1].strip() == NONE:
        return ()
    if len(body) > MAX_DEVICES:
        raise DeviceListError(f"{len(body)} devices: more than {MAX_DEVICES}")
    devices: list[Device] = []
    seen: dict[str, int] = {}
    for number, line in body:
        device = _device(number, line)
        if device.name in seen:
            raise DeviceListError(
                f"line {number}: {device.name} is listed twice (first on line {seen[device.name]})"
            )
        seen[device.name] = number
        devices.append(device)
    return tuple(devices)


def _device(number: int, line: str) -> Device:
    if len(line) > MAX_DEVICE_LINE:
        raise DeviceListError(
            f"line {number}: {len(line)} characters: longer than a device line ({MAX_DEVICE_LINE})"
        )
    m = _LINE.fullmatch(line.rstrip("\r"))
    if m is None or not BACKEND_DEVICE_NAME.fullmatch(m.group("name")):
        raise DeviceListError(
            f"line {number}: {_clip(line)!r} is not '  NAME: DESCRIPTION (N MiB, N MiB free)'"
        )
    desc = m.group("desc")
    if len(desc) > MAX_DESCRIPTION or not desc.isprintable():
        raise DeviceListError(
            f"line {number}: the description of {m.group('name')} is not printable text of up "
            f"to {MAX_DESCRIPTION} characters"
        )
    total, free = int(m.group("total")), int(m.group("free"))
    if total > MAX_DEVICE_MIB or free > MAX_DEVICE_MIB:
        raise DeviceListError(
            f"line {number}: {m.group('name')} claims {max(total, free)} MiB: more than "
            f"{MAX_DEVICE_MIB} MiB, no device's memory"
        )
    if free > total:
        raise DeviceListError(
            f"line {number}: {m.group('name')} has {free} MiB free of {total} MiB: more free "
            "than it has"
        )
    return Device(name=m.group("name"), description=desc, total=total * _MIB, free=free * _MIB)


def _clip(line: str) -> str:
    return line if len(line) <= 80 else line[:77] + "..."


def device_problems(devices: tuple[Device, ...], at: str) -> list[tuple[str, str]]:
    """A recorded device list, held to what `parse_device_list` accepts from the binary
    itself: bounded in count, names and sizes, each device once."""
    if len(devices) > MAX_DEVICES:
        return [(at, f"{len(devices)} devices: more than {MAX_DEVICES}")]
    names = [d.name for d in devices]
    for j, d in enumerate(devices):
        if what := _device_problem(d, seen=names[:j]):
            field, why = what
            return [(f"{at}[{j}].{field}", why)]
    return []


def _device_problem(d: Device, *, seen: list[str]) -> tuple[str, str] | None:
    problem: tuple[str, str] | None = None
    if not BACKEND_DEVICE_NAME.fullmatch(d.name):
        problem = ("name", f"{d.name[:40]!r} is not a backend device name")
    elif d.name in seen:
        problem = ("name", f"{d.name} is listed twice")
    elif len(d.description) > MAX_DESCRIPTION or not d.description.isprintable():
        problem = ("description", f"not printable text of up to {MAX_DESCRIPTION} characters")
    elif not 0 <= d.total <= MAX_DEVICE_BYTES:
        problem = ("total", f"{d.total} is not a device's size in bytes")
    elif not 0 <= d.free <= d.total:
        problem = ("free", f"{d.free} is not a size in bytes up to its total, {d.total}")
    return problem
