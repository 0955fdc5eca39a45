"""`check_config`: read override files through `HostFiles` as `load_config` does, and judge
each one purely (`exedra_engine._core.config.check`) by the flag tables it is given."""

from __future__ import annotations

import os
from collections.abc import Mapping

from exedra_engine._core.config.check import check_file
from exedra_engine._core.config.findings import Finding
from exedra_engine._core.config.parse import LocatedConfig, located_config
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.outcome import boundary
from exedra_engine._core.struct import Value
from exedra_engine._shell.load_config import config_path, override_paths, read_override
from exedra_engine._shell.local.host import LocalHost
from exedra_engine._shell.local.ports import HostFiles
from exedra_engine.errors import ConfigError


class CheckReport(Value, frozen=True, kw_only=True):
    """The findings of a set of override files, in file and line order."""

    files: tuple[str, ...]
    """The files judged, in the order they apply."""
    findings: tuple[Finding, ...] = ()
    invalid: bool = False
    """Whether a file is one the loader refuses (its finding has code ``invalid-file``)."""


def judge_config(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None = None,
    files: HostFiles | None = None,
    tables: Mapping[str, FlagTable] | None = None,
    *,
    executors: Executors = BUILTIN,
) -> CheckReport:
    """Judge the override files at `path` (a file or a directory, as `load_config` reads it;
    None: `DEFAULT_CONFIG_PATH`) by `tables` (by kind; the bundled tables otherwise).

    A file the loader refuses becomes an ``invalid-file`` finding and the others are still
    judged; a path that cannot be read or listed is a `ConfigError`. The ``engines:`` keys
    are the kinds of `executors`, and the flags are judged by their profiles.
    """
    host = files or LocalHost()
    paths = override_paths(config_path(path), host)
    findings: list[Finding] = []
    invalid = False
    for f in paths:
        text = read_override(f, host)
        try:
            located = located_config(text, f, executors=executors)
            findings.extend(check_file(located, tables or {}, executors=executors))
        except ConfigError as err:
            invalid = True
            findings.append(_invalid(f, err))
    return CheckReport(files=tuple(paths), findings=tuple(findings), invalid=invalid)


check_config = boundary(judge_config)
"""`judge_config` as a Result: ``Success(CheckReport)``, or ``Failure`` with its `EngineError`."""


def located_configs(
    path: str | bytes | os.PathLike[str] | os.PathLike[bytes] | None = None,
    files: HostFiles | None = None,
    *,
    executors: Executors = BUILTIN,
) -> tuple[LocatedConfig, ...]:
    """Every override file at `path` parsed with its lines, in the order they apply (their
    configs merge into what `load_config` returns); raises `ConfigError`."""
    host = files or LocalHost()
    return tuple(
        located_config(read_override(f, host), f, executors=executors)
        for f in override_paths(config_path(path), host)
    )


def _invalid(f: str, err: ConfigError) -> Finding:
    message = str(err)
    where = f"{f}:{err.line}: " if err.line else f"{f}: "
    if message.startswith(where):
        message = message[len(where) :]
    if err.path and message.startswith(err.path + ": "):
        message = message[len(err.path) + 2 :]
    return Finding(
        severity="error",
        code="invalid-file",
        file=f,
        line=err.line,
        path=err.path or "$",
        token="",
        message=message,
    )
