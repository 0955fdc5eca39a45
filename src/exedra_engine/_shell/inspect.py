"""`inspect`: the shell around the pure GGUF header parser, reading through `HostFiles`."""

from __future__ import annotations

import errno
import os

from exedra_engine._core.gguf.header import HeaderFacts, read_gguf_header
from exedra_engine._core.gguf.inventory import ModelInventory, combine_shards, shard_paths
from exedra_engine._core.gguf.inventory_reader import (
    MAX_SHARDS,
    MAX_TENSORS,
    read_gguf_inventory,
)
from exedra_engine._core.gguf.labels import tuning
from exedra_engine._core.gguf.quant import quant_name
from exedra_engine._core.outcome import boundary
from exedra_engine._core.values import ModelInfo
from exedra_engine._shell.local.host import LocalHost
from exedra_engine._shell.local.ports import HostFiles, NotRegularFile
from exedra_engine.errors import ModelUnreadable, NotGGUF


def read_model(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes], files: HostFiles | None = None
) -> ModelInfo:
    """Read a GGUF model's metadata from its header alone, never touching the weights.

    Failures: `ModelUnreadable` (missing, a directory, no permission) and `NotGGUF`
    (anything that is not a well-formed GGUF header), each naming the path. `files` is the
    port the file is read through (default: this machine's).
    """
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


inspect = boundary(read_model)
"""`read_model` as a Result: ``Success(ModelInfo)``, or ``Failure`` with its `EngineError`."""


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
        chat_template=h.chat_template,
        tuning=tuning(h.finetune, h.name, h.basename),
    )


def inventory_at(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes], files: HostFiles | None = None
) -> ModelInventory:
    """The model's tensor inventory and memory hyperparameters, from its header (every
    shard's header for a split model ``*-00001-of-0000N.gguf``). Failures as `inspect`'s."""
    p = os.fsdecode(path)
    host = files or LocalHost()
    shards = shard_paths(p)
    if shards is not None and len(shards) > MAX_SHARDS:
        raise NotGGUF(f"{p}: a split set of {len(shards)} shards (at most {MAX_SHARDS})")
    first, count, _ = _one_inventory(p, host)
    if count <= 1 and shards is None:
        return first
    if shards is None or len(shards) != count:
        raise NotGGUF(f"{p}: split.count is {count}, the file name says {len(shards or (p,))}")
    parts = [first]
    left = MAX_TENSORS - len(first.tensors)
    # Every shard is read as the first is (a regular file, a whole header, its tensors in
    # place), and the set's tensors are counted together: a split set is one model.
    for i, shard in enumerate(shards[1:], start=1):
        inv, n, no = _one_inventory(shard, host, max_tensors=left)
        if n != count or no != i:
            raise NotGGUF(f"{shard}: split {no} of {n}, expected split {i} of {count}")
        parts.append(inv)
        left -= len(inv.tensors)
    return combine_shards(parts)


read_inventory = boundary(inventory_at)
"""`inventory_at` as a Result: ``Success(ModelInventory)``, or ``Failure`` with its
`EngineError`."""


def _one_inventory(
    p: str, files: HostFiles, *, max_tensors: int = MAX_TENSORS
) -> tuple[ModelInventory, int, int]:
    if "\0" in p:
        raise ModelUnreadable(f"{p!r}: the path contains a NUL character")
    try:
        stream, size = files.open_file(p)
    except NotRegularFile:
        raise NotGGUF(f"{p}: not a regular file") from None
    except OSError as e:
        raise ModelUnreadable(f"{p}: {_reason(e)}") from None
    with stream:
        try:
            return read_gguf_inventory(stream, size, p, max_tensors=max_tensors)
        except OSError as e:
            raise ModelUnreadable(f"{p}: {_reason(e)}") from None
        except NotGGUF as e:
            raise type(e)(f"{p}: {e}") from None


def _reason(e: OSError) -> str:
    if e.errno == errno.EISDIR or isinstance(e, IsADirectoryError):
        return "is a directory, not a model file"
    return e.strerror or str(e)
