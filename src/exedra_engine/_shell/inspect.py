"""`inspect`: the shell around the pure GGUF header parser, reading through `HostFiles`."""

from __future__ import annotations

import errno
import os
from typing import TYPE_CHECKING

from exedra_engine._core.gguf_header import HeaderFacts, read_gguf_header
from exedra_engine._core.outcome import as_result
from exedra_engine._core.quant import quant_name
from exedra_engine._core.values import ModelInfo
from exedra_engine._shell.host import LocalHost
from exedra_engine._shell.ports import HostFiles, NotRegularFile
from exedra_engine.errors import EngineError, ModelUnreadable, NotGGUF

if TYPE_CHECKING:
    from returns.result import Result


def inspect(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes], files: HostFiles | None = None
) -> Result[ModelInfo, EngineError]:
    """Read a GGUF model's metadata from its header alone, never touching the weights.

    Failures: `ModelUnreadable` (missing, a directory, no permission) and `NotGGUF`
    (anything that is not a well-formed GGUF header), each naming the path. `files` is the
    port the file is read through (default: this machine's).
    """
    return as_result(read_model, path, files)


def read_model(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes], files: HostFiles | None = None
) -> ModelInfo:
    """`inspect` for the library's own callers: raises its `EngineError`."""
    p = os.fsdecode(path)
    if "\0" in p:
        raise ModelUnreadable(f"{p!r}: the path contains a NUL character")
    try:
        stream, size = (files or LocalHost()).open_file(p)
    except NotRegularFile:
        raise NotGGUF(f"{p}: not a regular file") from None
    except OSError as e:
        raise ModelUnreadable(f"{p}: {_reason(e)}") from None
    with stream:
        try:
            facts = read_gguf_header(stream, size)
        except OSError as e:
            raise ModelUnreadable(f"{p}: {_reason(e)}") from None
        except NotGGUF as e:
            raise NotGGUF(f"{p}: {e}") from None
    return model_info_from(p, size, facts)


def model_info_from(path: str, size: int, h: HeaderFacts) -> ModelInfo:
    """The public `ModelInfo` of parsed header facts."""
    return ModelInfo(
        path=path,
        size=size,
        architecture=h.architecture,
        name=h.name,
        quant=quant_name(h.file_type),
        blocks=h.blocks,
        context=h.context,
    )


def _reason(e: OSError) -> str:
    if e.errno == errno.EISDIR or isinstance(e, IsADirectoryError):
        return "is a directory, not a model file"
    return e.strerror or str(e)
