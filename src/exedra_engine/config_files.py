"""`load_config`: read override files through the file system, parse them purely."""

from __future__ import annotations

import os
from functools import reduce

from returns.result import Failure, Result, Success

from exedra_engine.config import config_from_yaml, merge_configs
from exedra_engine.constants import DEFAULT_CONFIG_PATH
from exedra_engine.errors import ConfigError, EngineError
from exedra_engine.values import Config

_MAX_FILE = 4 << 20


def load_config(path: str | os.PathLike[str] | None = None) -> Result[Config, EngineError]:
    """Load admin overrides from a directory or one YAML file.

    A directory contributes its ``*.yaml`` files in file-name order, a later file over an
    earlier one (see `exedra_engine.config`). None or "" means `DEFAULT_CONFIG_PATH`; a
    missing path is an empty config. Errors are `ConfigError`s naming file, line and field.
    """
    p = os.fspath(path) if path else DEFAULT_CONFIG_PATH
    if os.path.isdir(p):
        try:
            names = sorted(
                n for n in os.listdir(p) if n.endswith(".yaml") and not n.startswith(".")
            )
        except OSError as e:
            return Failure(ConfigError(f"{p}: cannot list directory: {e.strerror}"))
        files = [os.path.join(p, n) for n in names]
    elif os.path.lexists(p):
        files = [p]
    else:
        return Success(Config())
    configs: list[Config] = []
    for f in files:
        parsed = _read(f).bind(lambda text, f=f: config_from_yaml(text, f))  # type: ignore[misc]
        if isinstance(parsed, Failure):
            return parsed
        configs.append(parsed.unwrap())
    return Success(reduce(merge_configs, configs, Config()))


def _read(path: str) -> Result[str, ConfigError]:
    try:
        with open(path, "rb") as fh:
            data = fh.read(_MAX_FILE + 1)
    except IsADirectoryError:
        return Failure(ConfigError(f"{path}: is a directory, expected a YAML file"))
    except OSError as e:
        return Failure(ConfigError(f"{path}: cannot read: {e.strerror}"))
    if len(data) > _MAX_FILE:
        return Failure(ConfigError(f"{path}: larger than {_MAX_FILE} bytes"))
    try:
        return Success(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        return Failure(ConfigError(f"{path}: not UTF-8 text (byte {e.start})"))
