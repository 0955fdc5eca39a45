"""Where ``scripts/install-executors.sh`` (run by ``./dev``) puts the executors it builds, so
that the library and the CLI find them after ``PATH`` without the user wiring them up.

``$EXEDRA_EXECUTORS_BIN`` names the directory outright (``./dev`` exports it); else the
script's cache, ``${EXEDRA_EXECUTORS_CACHE:-${XDG_CACHE_HOME:-~/.cache}/exedra-engine/
executors}/bin/*``, one directory per build of both executors, newest first.
"""

from __future__ import annotations

import os
import re


def cache_root() -> str:
    """The executor cache directory the install script uses."""
    if explicit := os.environ.get("EXEDRA_EXECUTORS_CACHE"):
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "exedra-engine", "executors")


def cache_bin_dirs() -> tuple[str, ...]:
    """The directories to look in after PATH, in order (none when there is no cache)."""
    if explicit := os.environ.get("EXEDRA_EXECUTORS_BIN"):
        return (explicit,)
    bins = os.path.join(cache_root(), "bin")
    try:
        names = [n for n in os.listdir(bins) if not n.startswith(".")]  # .tmp.* half-made
    except OSError:
        return ()
    dirs = [os.path.join(bins, n) for n in names]

    def newest(d: str) -> float:
        try:
            return os.stat(d).st_mtime
        except OSError:
            return 0.0

    return tuple(sorted(dirs, key=newest, reverse=True))


def where(bin_dir: str) -> str:
    """How a directory of `cache_bin_dirs` was found, for a message."""
    if os.environ.get("EXEDRA_EXECUTORS_BIN") == bin_dir:
        return "the executor cache ($EXEDRA_EXECUTORS_BIN)"
    return f"the executor cache ({os.path.join(cache_root(), 'bin')})"


SOURCE_FILE = "SOURCE"
"""What ``scripts/install-executors.sh`` writes beside each build: the sdist it was built from
and the vendored tree's path in it (``llama-cpp-python==0.3.36 vendor/llama.cpp``)."""
_SOURCE = re.compile(r"([A-Za-z0-9._-]+)==([A-Za-z0-9.+_-]+) ([A-Za-z0-9._/-]+)")


def build_source(path: str) -> str:
    """Where the build of the binary at `path` came from, as the install script recorded it
    beside the binary's real file (``llama.cpp as vendored in llama-cpp-python 0.3.36``); ""
    for a binary it did not build. The version a binary states (``--version``) is its own
    tree's, which a vendoring package's version does not name."""
    try:
        with open(os.path.join(os.path.dirname(os.path.realpath(path)), SOURCE_FILE)) as f:
            line = f.read(512).strip()
    except (OSError, UnicodeDecodeError):
        return ""
    m = _SOURCE.fullmatch(line)
    if m is None:
        return ""
    package, version, tree = m.groups()
    return f"{tree.rstrip('/').rsplit('/', 1)[-1]} as vendored in {package} {version}"
