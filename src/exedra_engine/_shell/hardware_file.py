"""`load_hardware`: read a hardware file (``exedra-engine probe --json`` on the target host)
and decode it purely (`exedra_engine._core.host.hardware_file`)."""

from __future__ import annotations

import os

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.host.hardware_file import hardware_from_json
from exedra_engine._core.outcome import boundary
from exedra_engine._core.values import Hardware
from exedra_engine._shell.local.files import read_regular
from exedra_engine.errors import HardwareFileError

_MAX = 1 << 20
"""A probe's JSON is a few hundred bytes; a file larger than this is not one."""


def read_hardware(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes],
    *,
    executors: Executors = BUILTIN,
) -> Hardware:
    """The `Hardware` a hardware file describes; `HardwareFileError` naming the file (and the
    field, for a file that is JSON but not a host, or names a kind `executors` lacks)."""
    where = os.fsdecode(path)
    try:
        data = read_regular(path, _MAX)  # a FIFO or a device named like the file: refused
    except OSError as e:
        raise HardwareFileError(f"{where}: cannot read: {e.strerror or e}") from None
    if len(data) > _MAX:
        raise HardwareFileError(f"{where}: larger than {_MAX} bytes: not a probe's JSON")
    return hardware_from_json(data, where, executors=executors)


load_hardware = boundary(read_hardware)
"""`read_hardware` as a Result: ``Success(Hardware)``, or ``Failure`` with its `EngineError`."""
