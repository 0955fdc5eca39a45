"""An installed executor's own flags and version: ``BINARY --help`` and ``BINARY --version``
run under a timeout, parsed by the code that generated the bundled tables
(`exedra_engine._core.executors.helptext`), cached per binary.

The cache is one JSON file per binary in ``${XDG_CACHE_HOME:-~/.cache}/exedra-engine/
flag-tables/``, keyed by the binary's real path, size and modification time (and the
parser's version), written atomically; a binary replaced in place is read again. A binary
that cannot be run, times out, or lists no flags is judged by the bundled table, and the
origin says why. Nothing here raises: an unusable cache is a cache miss.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

import msgspec

from exedra_engine._core.executors.flags import FlagTable, Row
from exedra_engine._core.executors.helptext import (
    PARSER_VERSION,
    rows_from_help,
    table_from_help_rows,
    version_from,
)
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.struct import Value

if TYPE_CHECKING:
    from exedra_engine._core.config.findings import TableOrigin

# subprocess, tempfile and the findings module are imported where used: `probe` (every plan's
# cold start) reads a cached version and needs none of them.

TIMEOUT = 10.0
"""Seconds a binary gets to print its help or version (a cold llama-server takes ~0.1 s)."""
SLOW = 1.0
"""Seconds after which a binary still running is announced (`exedra_engine._shell.notice`)."""

_problems: dict[str, str] = {}
"""Why a binary's version or help could not be had in this process (a timeout is not
cached: a binary slow once, on a loaded host, is asked again next time)."""
_MAX_OUTPUT = 4 << 20
_TIMED_OUT = " (asked again next time)"


class ExecutorFacts(Value, frozen=True, kw_only=True):
    """What one binary says about itself, as cached."""

    parser: int
    path: str
    """The binary's real path (links resolved)."""
    size: int
    mtime_ns: int
    version: str | None = None
    """Its version ("" when it states none); None until asked."""
    rows: tuple[Row, ...] | None = None
    """Its flags, parsed from its help; None until asked."""
    note: str = ""
    """Why `rows` is empty, when it is: the help could not be read or listed no flags."""


def cache_dir() -> str:
    """Where parsed help texts are cached."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "exedra-engine", "flag-tables")


def executor_version(profile: ExecutorProfile, path: str) -> str:
    """The version the binary at `path` states (""; whisper-server has no ``--version``)."""
    facts = _facts(profile, path, want_rows=False)
    return (facts.version or "") if facts else ""


def executor_table(profile: ExecutorProfile, path: str) -> tuple[FlagTable, TableOrigin]:
    """The flag table of the binary at `path`, from its own help, and where it came from;
    `profile`'s bundled table (saying why) when the help gives no flags."""
    from exedra_engine._core.config.findings import TableOrigin, bundled_origin

    facts = _facts(profile, path, want_rows=True)
    if facts is None:
        return profile.flags, bundled_origin(profile, f"{path} cannot be read")
    if not facts.rows:
        return profile.flags, bundled_origin(profile, facts.note)
    origin = TableOrigin(
        kind=profile.kind,
        binary=profile.binary,
        source="binary",
        path=path,
        version=facts.version or "",
    )
    return table_from_help_rows(profile, facts.rows), origin


def executor_rows(profile: ExecutorProfile, path: str) -> tuple[Row, ...]:
    """The flags the binary at `path` lists in its help, parsed (() when it lists none or
    cannot be run): what ``probe --json --flags`` records for a plan made elsewhere."""
    facts = _facts(profile, path, want_rows=True)
    return (facts.rows or ()) if facts else ()


def suggest_flag(profile: ExecutorProfile, path: str, flag: str) -> str:
    """The installed binary's flag closest to `flag`, which it refused ("" when `flag` is one
    of its own, a known flag with a bad value, or nothing is close)."""
    from exedra_engine._core.config.did_you_mean import did_you_mean

    table, _ = executor_table(profile, path)
    return "" if table.lookup(flag) is not None else did_you_mean(flag, table)


def _facts(profile: ExecutorProfile, path: str, *, want_rows: bool) -> ExecutorFacts | None:
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except (OSError, ValueError):
        return None
    entry = os.path.join(cache_dir(), _entry_name(real, st.st_size, st.st_mtime_ns))
    facts = _read(entry, real, st.st_size, st.st_mtime_ns)
    if facts is None:
        facts = ExecutorFacts(parser=PARSER_VERSION, path=real, size=st.st_size,
                              mtime_ns=st.st_mtime_ns)  # fmt: skip
    changed = transient = False
    if facts.version is None:
        version = ""
        if profile.version_flag:
            text, problem = _run([path, profile.version_flag])
            version = version_from(text)
            if problem:
                _problems[real] = problem
                transient = True
        facts = msgspec.structs.replace(facts, version=version)
        changed = True
    if want_rows and facts.rows is None:
        facts, timed_out = _with_rows(profile, path, facts)
        transient = transient or timed_out
        changed = True
    if changed and not transient:
        _write(entry, facts)
    return facts


def version_problem(path: str) -> str:
    """Why the binary at `path` stated no version in this process ("" if it was asked and
    answered, or its answer was cached)."""
    try:
        return _problems.get(os.path.realpath(path), "")
    except (OSError, ValueError):
        return ""


def _with_rows(
    profile: ExecutorProfile, path: str, facts: ExecutorFacts
) -> tuple[ExecutorFacts, bool]:
    """The facts with the help's rows, and whether the answer was a timeout (not cached)."""
    if not profile.help_style:
        note = f"{profile.binary}'s help is not one this library reads"
        return msgspec.structs.replace(facts, rows=(), note=note), False
    text, problem = _run([path, "--help"])
    rows = rows_from_help(profile, text) if not problem else ()
    note = problem or ("" if rows else f"{path} --help listed no flags")
    return msgspec.structs.replace(facts, rows=rows, note=note), problem.endswith(_TIMED_OUT)


def _entry_name(real: str, size: int, mtime_ns: int) -> str:
    # Readable, and unique enough: the entry holds the path, size and time it was made for,
    # and a mismatch is a miss.
    tail = re.sub(r"[^A-Za-z0-9._-]", "_", real)[-120:]
    return f"{tail}-{size}-{mtime_ns}-p{PARSER_VERSION}.json"


def _read(entry: str, real: str, size: int, mtime_ns: int) -> ExecutorFacts | None:
    from exedra_engine._shell.local.files import read_regular

    try:
        facts = msgspec.json.decode(read_regular(entry, _MAX_OUTPUT), type=ExecutorFacts)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    same = (facts.parser, facts.path, facts.size, facts.mtime_ns)
    return facts if same == (PARSER_VERSION, real, size, mtime_ns) else None


def _write(entry: str, facts: ExecutorFacts) -> None:
    from exedra_engine._shell.local.files import write_cache_entry

    write_cache_entry(entry, msgspec.json.encode(facts))


def _run(argv: list[str]) -> tuple[str, str]:
    """The output (stdout, then stderr: whisper-server prints its help there) of `argv`, and
    why there is none ("" when it ran). Bounded end to end (`ask_binary`): a binary that
    starts serving instead of answering, floods, or leaves a helper holding its pipes is
    killed with everything it started, and nothing is left behind."""
    from exedra_engine._shell.local.bounded_run import ask_binary

    ran = ask_binary(argv, timeout=TIMEOUT, max_output=_MAX_OUTPUT, slow=SLOW)
    if ran.problem:
        return "", ran.problem + (_TIMED_OUT if ran.timed_out else "")
    return (ran.out + b"\n" + ran.err).decode("utf-8", errors="replace"), ""
