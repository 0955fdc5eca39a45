"""An executor's ``--help`` text to flag rows, and its ``--version`` text to a version. Pure.

The same parser made the bundled tables (`exedra_engine._core.executors._flagdata`, through
scripts/gen_flag_tables.py) and reads an installed binary's own help (the shell in
`exedra_engine._shell.local.flag_tables`), so the two can only differ where the binaries do.

Each option becomes a row (names, negations, nargs, env, takes): the spellings that set it, the
spellings that unset it (``--no-webui``), how many values follow it, the environment variables
the executor reads for it, and what its value must be (`takes`, "" when the help does not say):

- ``int``: the value placeholder is ``N`` (or ``PORT``, ``<0|1>``, ``<0...100>``) and the
  default the help shows is a whole number (``(default: 2048)``, whisper's ``[2      ]``). The
  executors read these with ``std::stoi``.
- ``float``: the placeholder is ``N`` and the default has a decimal point (``-1.00``,
  ``FLT_MAX``): ``std::stof``.
- ``number``: the placeholder is ``N`` but no numeric default is shown (``same as --threads``,
  ``loaded from model``): an integer or a float, which of the two the help does not say.
- ``choice:a,b,c``: the placeholder lists the values (``{none,linear,yarn}``,
  ``[on|off|auto]``) or the help says ``allowed values: ...``; the executor refuses others.
  llama.cpp's on/off choices also list its boolean spellings (``1``, ``true``, ``enabled``...).

A placeholder ``N`` whose help quotes word alternatives (``-ngl``: "an exact number, 'auto', or
'all'") takes no type. ``<0|1>`` is read as an integer, not a choice: llama-server accepts
``--cpu-strict 2`` (checked with the binary).

The layouts understood (`parse_help`'s `style`, an `ExecutorProfile.help_style`):

- ``llama.cpp``: llama.cpp's common argument table. Names and placeholder in the first 40
  columns, the description after them and on indented continuation lines, ``(env: NAME)``.
- ``whisper.cpp``: whisper.cpp's examples. ``-t N, --threads N [2  ] description``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from exedra_engine._core.executors.flags import FlagTable, Row, table_from_rows
from exedra_engine._core.executors.profile import ExecutorProfile

STYLES = ("llama.cpp", "whisper.cpp")
PARSER_VERSION = 1
"""Bumped whenever a change here changes the rows of some help text: cached parses of an
installed binary's help made by another version are read again."""

_NEG = ("--no-", "-no-")
_INT_DEFAULT = re.compile(r"^-?\d+(?![.\d])")
_FLOAT_DEFAULT = re.compile(r"^(-?\d+\.\d+|FLT_MAX)")
_QUOTED_WORD = re.compile(r"'[a-z]+'")
_SWITCH_SYNONYMS = ("enabled", "disabled", "true", "false", "1", "0")
_ALLOWED = re.compile(r"allowed values: ([\w.,\s-]+?)(?:\(|$)")


def parse_help(style: str, text: str) -> tuple[Row, ...]:
    """The rows of a help text in `style` (one of `STYLES`); () for an unknown style."""
    if style == "llama.cpp":
        return _parse_llama(text)
    if style == "whisper.cpp":
        return _parse_whisper(text)
    return ()


def apply_corrections(rows: Iterable[Row], corrections: Mapping[str, Row]) -> tuple[Row, ...]:
    """`rows` with the facts a help text leaves out put right (`ExecutorProfile.help_corrections`):
    a row whose last name is a key of `corrections` is replaced by its value, or dropped when
    the value's nargs is negative (two help lines that are one setting)."""
    out: list[Row] = []
    for row in rows:
        key = row[0][-1] if row[0] else ""
        fix = corrections.get(key)
        if fix is None:
            out.append(row)
        elif fix[2] >= 0:
            out.append(fix)
    return tuple(out)


def rows_from_help(profile: ExecutorProfile, text: str) -> tuple[Row, ...]:
    """The rows of `profile`'s executor from its help text, corrections applied."""
    return apply_corrections(parse_help(profile.help_style, text), profile.help_corrections)


def table_from_help_rows(profile: ExecutorProfile, rows: Iterable[Row]) -> FlagTable:
    """The flag table of `profile`'s executor from rows of its help (`rows_from_help`)."""
    return table_from_rows(profile.binary, tuple(rows), profile.repeatable)


def version_from(text: str) -> str:
    """The version a ``--version`` text states (llama-server: ``version: 0.10434 (abc123)``),
    or "" when it states none (whisper-server has no ``--version``: it prints its usage)."""
    for line in text.splitlines():
        m = re.match(r"\s*version:\s*(\S.*?)\s*$", line)
        if m:
            return m.group(1)
    return ""


def _names_and_metavars(head: str) -> tuple[list[str], list[str]]:
    head = re.sub(r"<[^>]*>", lambda m: m.group().replace(" ", "_"), head)
    names: list[str] = []
    metavars: list[str] = []
    for tok in head.split():
        if tok.startswith("-") and len(tok) > 1 and not tok[1:2].isdigit():
            names.append(tok.rstrip(","))
        else:
            metavars.append(tok.rstrip(","))
    return names, metavars


def _split_negations(names: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not any(n.startswith(_NEG) for n in names) or all(n.startswith(_NEG) for n in names):
        # A lone --no-X (llama's --no-host: bypass the host buffer) is a flag of its own.
        return tuple(names), ()
    pos: list[str] = []
    neg: list[str] = []
    seen_long = False
    for n in names:
        is_neg = n.startswith(_NEG) or (seen_long and not n.startswith("--"))
        (neg if is_neg else pos).append(n)
        seen_long = seen_long or (n.startswith("--") and not is_neg)
    return tuple(pos), tuple(neg)


def _choices(metavar: str) -> tuple[str, ...]:
    m = re.fullmatch(r"\{([\w.-]+(?:,[\w.-]+)+)\}|\[([\w.-]+(?:\|[\w.-]+)+)\]", metavar)
    if m is None:
        return ()
    return tuple(re.split(r"[,|]", m.group(1) or m.group(2)))


def takes(metavar: str, default: str, description: str) -> str:
    """What a value must be, from its placeholder, the default the help shows and the
    description (see the module docstring); "" when the help does not say."""
    choices = _choices(metavar)
    if choices:
        return "choice:" + ",".join(choices)
    if re.fullmatch(r"<-?\d+(\|-?\d+)+>|<-?\d+\.\.\.-?\d+>", metavar):
        return "int"
    if metavar in ("N", "PORT"):
        return _numeric(default, description)
    allowed = _ALLOWED.search(description)
    values = tuple(v.strip() for v in allowed.group(1).split(",")) if allowed else ()
    if metavar == "TYPE" and all(values) and values:
        return "choice:" + ",".join(values)
    return ""


def _numeric(default: str, description: str) -> str:
    if _QUOTED_WORD.search(description):
        return ""  # word alternatives: "an exact number, 'auto', or 'all'"
    if _FLOAT_DEFAULT.match(default):
        return "float"
    return "int" if _INT_DEFAULT.match(default) else "number"


class _Option:
    def __init__(self, head: str, description: str) -> None:
        self.names, self.metavars = _names_and_metavars(head)
        self.description = [description.strip()]
        self.env: list[str] = []

    def row(self) -> Row:
        pos, neg = _split_negations(self.names)
        nargs = min(len(self.metavars), 2)
        desc = " ".join(d for d in self.description if d)
        default = re.search(r"default: ([^,)]*)", desc)
        kind = takes(self.metavars[-1], default.group(1) if default else "", desc) if nargs else ""
        if kind.startswith("choice:") and {"on", "off"} <= set(kind[7:].split(",")):
            # llama.cpp's on/off options also take its boolean spellings (checked with the
            # binary: --flash-attn 1, enabled and true start; ON is refused).
            kind += "," + ",".join(_SWITCH_SYNONYMS)
        return (pos, neg, nargs, tuple(self.env), kind)


def _parse_llama(text: str) -> tuple[Row, ...]:
    options: list[_Option] = []
    cur: _Option | None = None
    for line in text.splitlines():
        if line.startswith("-----"):
            continue
        if line.startswith("-"):
            split = len(line) > 40 and line[39] == " " and line[40] != " "
            cur = _Option(line[:40] if split else line, line[40:] if split else "")
            options.append(cur)
        elif cur is not None:
            m = re.search(r"\(env: ([A-Z0-9_]+)\)", line)
            if m:
                cur.env.append(m.group(1))
            cur.description.append(line.strip())
    return tuple(o.row() for o in options)


def _parse_whisper(text: str) -> tuple[Row, ...]:
    rows: list[Row] = []
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("-") or "[" not in s:
            continue
        head, _, rest = s.partition("[")
        names, metavars = _names_and_metavars(head)
        default, _, description = rest.partition("]")
        uniq = tuple(dict.fromkeys(names))
        kind = takes(metavars[-1], default.strip(), description) if metavars else ""
        rows.append((uniq, (), 1 if metavars else 0, (), kind))
    return tuple(rows)
