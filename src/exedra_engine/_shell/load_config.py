"""`load_config`: read override files through the file system, parse them purely."""

from __future__ import annotations

import os
import stat

from returns.result import Failure, Result, Success

from exedra_engine._core.config import config_from_yaml, merge_all
from exedra_engine._core.values import Config
from exedra_engine.constants import DEFAULT_CONFIG_PATH
from exedra_engine.errors import ConfigError, EngineError

_MAX_FILE = 4 << 20
_ENDINGS = (".yaml", ".yml")


def load_config(path: str | os.PathLike[str] | None = None) -> Result[Config, EngineError]:
    """Load admin overrides from a directory or one YAML file.

    A directory contributes its ``*.yaml`` and ``*.yml`` files (hidden ones excepted) in
    file-name order, a later file over an earlier one (see `exedra_engine._core.config`); a name
    whose ending differs only in case (``x.YAML``) is an error, not silently skipped. None or
    "" means `DEFAULT_CONFIG_PATH`. Only a path that does not exist is an empty config;
    anything else that cannot be read (a FIFO, a device, a path too long) is a `ConfigError`
    naming file, line and field.
    """
    p = os.fspath(path) if path else DEFAULT_CONFIG_PATH
    if "\0" in p:
        return Failure(ConfigError(f"{p!r}: the path contains a NUL character"))
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return Success(Config())
    except OSError as e:
        return Failure(ConfigError(f"{p}: cannot read: {e.strerror or e}"))
    if stat.S_ISDIR(st.st_mode):
        try:
            entries = sorted(os.listdir(p))
        except OSError as e:
            return Failure(ConfigError(f"{p}: cannot list directory: {e.strerror}"))
        names = []
        for n in entries:
            if n.startswith("."):
                continue
            if n.endswith(_ENDINGS):
                names.append(n)
            elif n.lower().endswith(_ENDINGS):
                return Failure(
                    ConfigError(f"{os.path.join(p, n)}: rename it to end in .yaml to be read")
                )
        files = [os.path.join(p, n) for n in names]
    else:
        files = [p]
    configs: list[Config] = []
    for f in files:
        parsed = _read(f).bind(lambda text, f=f: config_from_yaml(text, f))  # type: ignore[misc]
        if isinstance(parsed, Failure):
            return parsed
        configs.append(parsed.unwrap())
    return Success(merge_all(configs))


def _read(path: str) -> Result[str, ConfigError]:
    try:
        # O_NONBLOCK: a FIFO named like a config file must not hang the caller.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return Failure(ConfigError(f"{path}: cannot read: {e.strerror or e}"))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        what = "is a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        return Failure(ConfigError(f"{path}: {what}, expected a YAML file"))
    if st.st_size > _MAX_FILE:
        os.close(fd)
        return Failure(ConfigError(f"{path}: larger than {_MAX_FILE} bytes"))
    with os.fdopen(fd, "rb", buffering=0) as fh:
        try:
            data = fh.read(_MAX_FILE + 1)
        except OSError as e:
            return Failure(ConfigError(f"{path}: cannot read: {e.strerror or e}"))
    if len(data) > _MAX_FILE:
        return Failure(ConfigError(f"{path}: larger than {_MAX_FILE} bytes"))
    try:
        return Success(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        return Failure(ConfigError(f"{path}: not UTF-8 text (byte {e.start})"))
