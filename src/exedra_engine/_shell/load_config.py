"""`load_config`: read override files through `HostFiles`, parse them purely."""

from __future__ import annotations

import os
import posixpath

from exedra_engine._core.config.overrides import Config
from exedra_engine._core.config.parse import merge_all, parse_config
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.outcome import boundary
from exedra_engine._shell.local.host import LocalHost
from exedra_engine._shell.local.ports import HostFiles, NotRegularFile
from exedra_engine.constants import DEFAULT_CONFIG_PATH
from exedra_engine.errors import ConfigError

_MAX_FILE = 4 << 20
_ENDINGS = (".yaml", ".yml")


def read_config(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None = None,
    files: HostFiles | None = None,
    *,
    executors: Executors = BUILTIN,
) -> Config:
    """Load admin overrides from a directory or one YAML file.

    A directory contributes its ``*.yaml`` and ``*.yml`` files (hidden ones excepted) in
    file-name order, a later file over an earlier one (see
    `exedra_engine._core.config.parse`); a name whose ending differs only in case (``x.YAML``)
    is an error, not silently skipped. None or
    "" means `DEFAULT_CONFIG_PATH`. Only a path that does not exist is an empty config;
    anything else that cannot be read (a FIFO, a device, a path too long) is a `ConfigError`
    naming file, line and field. `files` is the port the files are read through (default:
    this machine's). The ``engines:`` keys are the kinds of `executors`.
    """
    p = config_path(path)
    host = files or LocalHost()
    return merge_all(
        [
            parse_config(read_override(f, host), f, executors=executors)
            for f in override_paths(p, host)
        ]
    )


load_config = boundary(read_config)
"""`read_config` as a Result: ``Success(Config)``, or ``Failure`` with the `ConfigError`."""


def config_path(path: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None) -> str:
    """The override path as text: None or empty is `DEFAULT_CONFIG_PATH`; bytes are decoded
    as the file system does (undecodable bytes kept as surrogates)."""
    return os.fsdecode(path) if path else DEFAULT_CONFIG_PATH


def override_paths(p: str, files: HostFiles) -> list[str]:
    """The override files `p` names, in the order they apply: [] for a path that does not
    exist, `p` itself for a file, a directory's YAML files by name. Raises `ConfigError`."""
    if "\0" in p:
        raise ConfigError(f"{p!r}: the path contains a NUL character")
    try:
        kind = files.file_kind(p)
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror or e}", file=p) from None
    if kind == "missing":
        return []
    return _directory(p, files) if kind == "directory" else [p]


def _directory(p: str, files: HostFiles) -> list[str]:
    entries = files.list_dir(p)
    if entries is None:
        raise ConfigError(f"{p}: cannot list directory", file=p)
    names = []
    for n in entries:
        if n.startswith("."):
            continue
        if n.endswith(_ENDINGS):
            names.append(n)
        elif n.lower().endswith(_ENDINGS):
            raise ConfigError(
                f"{posixpath.join(p, n)}: rename it to end in .yaml to be read",
                file=posixpath.join(p, n),
            )
    return [posixpath.join(p, n) for n in names]


def read_override(path: str, files: HostFiles) -> str:
    """One override file's text, raising `ConfigError` for what cannot be read as one."""
    try:
        stream, size = files.open_file(path)
        if size > _MAX_FILE:
            stream.close()
            raise ConfigError(f"{path}: larger than {_MAX_FILE} bytes", file=path)
        with stream:
            data = stream.read(_MAX_FILE + 1)
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, expected a YAML file", file=path) from None
    except NotRegularFile:
        raise ConfigError(f"{path}: not a regular file, expected a YAML file", file=path) from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror or e}", file=path) from None
    if len(data) > _MAX_FILE:
        raise ConfigError(f"{path}: larger than {_MAX_FILE} bytes", file=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text (byte {e.start})", file=path) from None
