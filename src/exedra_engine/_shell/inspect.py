"""`inspect`: the shell around the pure GGUF header parser."""

from __future__ import annotations

import errno
import os
import stat

from returns.result import Failure, Result

from exedra_engine._core.gguf_header import HeaderFacts, parse_gguf_header
from exedra_engine._core.quant import quant_name
from exedra_engine._core.values import ModelInfo
from exedra_engine.errors import EngineError, ModelUnreadable, NotGGUF


def inspect(path: str | os.PathLike[str]) -> Result[ModelInfo, EngineError]:
    """Read a GGUF model's metadata from its header alone, never touching the weights.

    Failures: `ModelUnreadable` (missing, a directory, no permission) and `NotGGUF`
    (anything that is not a well-formed GGUF header), each naming the path.
    """
    p = os.fspath(path)
    if "\0" in p:
        return Failure(ModelUnreadable(f"{p!r}: the path contains a NUL character"))
    try:
        # O_NONBLOCK: a FIFO given as a model path must not hang the caller.
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return Failure(ModelUnreadable(f"{p}: {_reason(e)}"))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            return Failure(ModelUnreadable(f"{p}: is a directory, not a model file"))
        return Failure(NotGGUF(f"{p}: not a regular file"))
    with os.fdopen(fd, "rb", buffering=0) as f:
        try:
            facts = parse_gguf_header(f, st.st_size)
        except OSError as e:
            return Failure(ModelUnreadable(f"{p}: {_reason(e)}"))
    return facts.map(lambda h: model_info_from(p, st.st_size, h)).alt(
        lambda e: NotGGUF(f"{p}: {e}")
    )


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
    if e.errno == errno.EISDIR:
        return "is a directory, not a model file"
    return e.strerror or str(e)
