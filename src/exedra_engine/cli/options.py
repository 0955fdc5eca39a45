"""Option values checked where argparse parses them, so that a bad one is a usage error
(one line, exit 2) naming the option, never a traceback or a silent misbehaviour further on
(a negative timeout, a zero interval that busy-loops, a port out of range).

Each is an argparse ``type=``; `argparse.ArgumentTypeError`'s message is what argparse
prints after ``argument --NAME:``. A message quotes the value only when it has the form of
what the option takes (`render.has_form`: a path, a number), so a key typed into the wrong
option is never echoed.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable

from exedra_engine.errors import EngineError

GROUP_ONLY = ("router", "llama-swap")
"""Emit targets (``--emit``, ``--target``) for a group only: one executor per member has
nothing to route or swap. Here, not with the emitter's output, so that building every
``plan`` parser does not import that."""


def _it(text: str) -> str:
    from exedra_engine.cli.render import has_form, shown

    return shown(text) if has_form(text) else "the value given (not shown)"


def seconds(text: str) -> float:
    """A positive, finite number of seconds (a timeout, a grace period, an interval)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {_it(text)}")
    return value


def seconds_or_zero(text: str) -> float:
    """A non-negative, finite number of seconds, where 0 means "not at all" (``--drain``)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(
            f"expected 0 or a positive number of seconds, not {_it(text)}"
        )
    return value


def env_item(text: str) -> str:
    """``--env K=V``: a name, ``=``, a value (possibly empty). A mistyped entry is not quoted
    unless it has a harmless form: it may be a bare secret."""
    name, sep, _ = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected K=V, not {_it(text)}")
    return text


def count(*, least: int = 0, most: int | None = None, zero: str = "") -> Callable[[str], int]:
    """An integer in [least, most]; `zero` says what 0 means where it is allowed."""

    def parse(text: str) -> int:
        try:
            value: int | None = int(text, 10)
        except ValueError:
            value = None
        if value is None or value < least or (most is not None and value > most):
            bounds = f"from {least} to {most}" if most is not None else f"{least} or more"
            meaning = f" (0: {zero})" if zero and least == 0 else ""
            raise argparse.ArgumentTypeError(
                f"expected a whole number {bounds}{meaning}, not {_it(text)}"
            )
        return value

    parse.__name__ = "count"
    return parse


PORT = count(most=65535, zero="scan for a free one")
PORT_BASE = count(most=65535, zero="the default")


def executor_path(text: str) -> str:
    """``--executor PATH`` of plan and launch: a file, not a directory; the ``KIND=PATH``
    form of ``config --check`` is refused with the form that works here."""
    from exedra_engine._core.executors.builtin import BUILTIN

    kind, sep, rest = text.partition("=")
    if sep and kind in BUILTIN.kinds and not os.path.exists(text):
        raise argparse.ArgumentTypeError(
            f"KIND=PATH is config --check's form; here --kind gives the kind: "
            f"write --executor {_it(rest)}"
        )
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{_it(text)} is a directory, not an executor binary")
    return text


def out_dir(path: str, names: list[str]) -> EngineError | None:
    """Why files named `names` cannot be written into the directory `path` (``--out``), or
    None, having created it if its parent exists. A missing parent is refused rather than
    made: it is more often a typo than a wish."""
    from exedra_engine.errors import PlanError

    if os.path.exists(path) and not os.path.isdir(path):
        return PlanError(f"--out {path}: exists and is not a directory (--out names a directory)")
    if not os.path.exists(path):
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            return PlanError(f"--out {path}: its parent directory {parent} does not exist")
        try:
            os.mkdir(path)
        except OSError as e:
            return PlanError(f"--out {path}: cannot create the directory: {e.strerror or e}")
    for name in names:
        if why := _entry_problem(os.path.join(path, name)):
            return PlanError(f"--out {path}: {why}")
    if not os.access(path, os.W_OK | os.X_OK):
        return PlanError(f"--out {path}: the directory is not writable")
    return None


def _entry_problem(target: str) -> str:
    """Why the file `target` in an out dir is not written ("" when absent or a plain file):
    a link planted where a unit goes would have it written over another file."""
    import stat

    try:
        mode = os.lstat(target).st_mode
    except OSError:
        return ""
    if stat.S_ISDIR(mode):
        return f"{target} is a directory; the file cannot be written"
    if not stat.S_ISREG(mode):
        return (
            f"{target} is a symbolic link or not a regular file: not written over (remove "
            "it, or choose another --out)"
        )
    return ""


def config_file(text: str) -> str:
    """``--config PATH`` and ``config PATH``: a path the user names must exist. Only the
    default may be absent (a host without overrides); a typo'd path read as an empty config
    would make a CI lint job pass on nothing."""
    from exedra_engine.constants import DEFAULT_CONFIG_PATH

    if text and text != DEFAULT_CONFIG_PATH and not os.path.lexists(text):
        raise argparse.ArgumentTypeError(
            f"{_it(text)} does not exist (only the default, {DEFAULT_CONFIG_PATH}, may be absent)"
        )
    return text


def log_file(text: str) -> str:
    """``launch --log-file FILE``: appended to, so it may exist, but as a file, in a
    directory that exists (checked here, not found out once the executor has started)."""
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{_it(text)} is a directory, not a file to append to")
    if os.path.exists(text) and not os.path.isfile(text):
        # A FIFO would block the open (or the executor's logs), a device swallow them.
        raise argparse.ArgumentTypeError(
            f"{_it(text)} is not a regular file (a FIFO, a socket or a device); "
            "--quiet drops the logs"
        )
    parent = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(f"the directory of {_it(text)} does not exist")
    return text
