"""systemd's INI files as data: a small writer, the escaping of systemd's own rules, and the
reader the checks use to take an emitted unit apart again. Pure.

Values are escaped for the setting they go in, then written; the writer refuses any value that
could still break a line (a control character, a trailing backslash that would continue it).

The rules, from systemd.syntax(7), systemd.unit(5) ("Specifiers") and systemd.service(5)
("Command lines"), checked with systemd 252's ``systemd-analyze verify``:

- Every setting resolves specifiers: a literal ``%`` is ``%%``.
- ``Exec*=`` and ``Environment=`` split their value into words: double quotes group, and a
  backslash inside them is a C escape (``\\\\``, ``\\"``, ``\\xNN``); unknown escapes are
  warned about and kept. A quoted ``";"`` is an argument, not a command separator.
- ``Exec*=`` expands ``$NAME`` and ``${NAME}`` in every argument but the first when it runs:
  a literal ``$`` is ``$$``. ``Environment=`` expands nothing.
- NUL cannot be written at all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from exedra_engine._core.struct import freeze

Section = tuple[str, Sequence[tuple[str, str]]]
"""One ``[Name]`` and its settings, in order (a key may repeat)."""

_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_UNSAFE = re.compile(r"[\x00-\x1f\x7f]")


class Unwritable(ValueError):
    """A value that no escaping can put in a unit file (a NUL, a lone surrogate)."""


def write_ini(sections: Sequence[Section], header: Sequence[str] = ()) -> str:
    """The file: `header` as ``#`` comment lines, then each section. Values must be escaped
    already; one that could break its line is a bug, and raises ValueError."""
    lines = [f"# {h}" for h in header]
    for name, settings in sections:
        if not settings:
            continue
        if lines:
            lines.append("")
        lines.append(f"[{name}]")
        for key, value in settings:
            if not _KEY.fullmatch(key):
                raise ValueError(f"not a setting name: {key!r}")
            if _UNSAFE.search(value) or value.endswith("\\") or value != value.strip(" \t"):
                raise ValueError(f"{key}= would not stay on its line: {value!r}")
            lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"


def _check_writable(text: str) -> None:
    if "\0" in text:
        raise Unwritable("contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise Unwritable("is not valid UTF-8 (a lone surrogate)") from None


def _escape(text: str, *, dollar: bool) -> str:
    _check_writable(text)
    out: list[str] = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "%":
            out.append("%%")
        elif ch == "$" and dollar:
            out.append("$$")
        elif ch < " " or ch == "\x7f":
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def exec_word(arg: str) -> str:
    """One argument of an ``Exec*=`` line (not the executable): quoted, C-escaped, ``%%``
    and ``$$``."""
    return _escape(arg, dollar=True)


def exec_line(path: str, args: Sequence[str]) -> str:
    """An ``Exec*=`` value: `path`, which must be a plain absolute path, then the quoted args.
    The executable is written bare (systemd refuses quotes and specials in it, and reads a
    leading ``-@:+!`` as a prefix), so anything else is refused here."""
    if not re.fullmatch(r"/[A-Za-z0-9._/+@-]*", path) or "//" in path:
        raise Unwritable(f"executable {path!r} is not a plain absolute path")
    return " ".join([path, *(exec_word(a) for a in args)])


def env_assignment(name: str, value: str, *, dollar: bool = False) -> str:
    """One ``Environment=`` word: ``"NAME=VALUE"``, quoted and C-escaped, ``%%``; ``$$``
    only with `dollar` (systemd's own setting expands no variables, but Quadlet copies the
    value into ``ExecStart=``, which does)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise Unwritable(f"variable name {name!r} is not one systemd accepts")
    return _escape(f"{name}={value}", dollar=dollar)


def plain(value: str, *, dollar: bool = False) -> str:
    """A value written as is (a path, a description): specifiers escaped, and ``$`` as
    ``$$`` with `dollar` (a Quadlet setting: Quadlet copies it into ``ExecStart=``, where
    systemd would expand ``$NAME``); refused if it holds what would break the line."""
    _check_writable(value)
    if _UNSAFE.search(value) or value.endswith("\\") or value != value.strip():
        raise Unwritable(f"{value!r} cannot be written as a plain setting")
    value = value.replace("%", "%%")
    return value.replace("$", "$$") if dollar else value


# -- reading back (for the checks and the tests) ----------------------------------------------


def read_ini(text: str) -> dict[str, list[tuple[str, str]]]:
    """Sections and their settings, in order; comments and blank lines skipped. Continuation
    lines are joined as systemd joins them."""
    out: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        if stripped.startswith("[") and stripped.endswith("]"):
            current = out.setdefault(stripped[1:-1], [])
            continue
        key, sep, value = stripped.partition("=")
        if sep and current is not None:
            current.append((key.strip(), value.strip()))
    return out


def setting(sections: Mapping[str, list[tuple[str, str]]], section: str, key: str) -> list[str]:
    """Every value of `key` in `section`, in order."""
    return [v for k, v in sections.get(section, []) if k == key]


_C = freeze({"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "s": " "})


def resolve_specifiers(value: str, specifiers: Mapping[str, str]) -> str:
    """``%%`` and the given ``%x`` specifiers replaced, as systemd does before splitting.
    An unknown specifier raises ValueError."""
    out: list[str] = []
    i = 0
    while i < len(value):
        ch = value[i]
        if ch != "%":
            out.append(ch)
            i += 1
            continue
        nxt = value[i + 1 : i + 2]
        if nxt == "%":
            out.append("%")
        elif nxt in specifiers:
            out.append(specifiers[nxt])
        else:
            raise ValueError(f"unknown specifier %{nxt}")
        i += 2
    return "".join(out)


def split_words(value: str) -> list[str]:
    """Words as systemd's ``extract_first_word(EXTRACT_UNQUOTE|EXTRACT_CUNESCAPE)`` cuts
    them: quotes group, backslash escapes are C escapes. ValueError for an open quote."""
    words: list[str] = []
    i, n = 0, len(value)
    while True:
        while i < n and value[i] in " \t\n":
            i += 1
        if i >= n:
            return words
        word: list[str] = []
        quote = ""
        while i < n:
            ch = value[i]
            if ch == "\\" and i + 1 < n:
                i, text = _unescape(value, i + 1)
                word.append(text)
                continue
            if quote:
                if ch == quote:
                    quote = ""
                else:
                    word.append(ch)
            elif ch in "\"'":
                quote = ch
            elif ch in " \t\n":
                break
            else:
                word.append(ch)
            i += 1
        if quote:
            raise ValueError("unterminated quote")
        words.append("".join(word))


def _unescape(value: str, i: int) -> tuple[int, str]:
    ch = value[i]
    if ch in _C:
        return i + 1, _C[ch]
    if ch == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", value[i + 1 : i + 3]):
        return i + 3, chr(int(value[i + 1 : i + 3], 16))
    if ch in "\\\"'":
        return i + 1, ch
    raise ValueError(f"unknown escape \\{ch}")


def expand_dollars(word: str) -> str:
    """``$$`` as a literal ``$``, as systemd does when it runs an ``Exec*=`` argument; any
    other ``$`` (a variable reference) raises ValueError: an emitted unit has none."""
    out: list[str] = []
    i = 0
    while i < len(word):
        if word[i] == "$":
            if word[i + 1 : i + 2] != "$":
                raise ValueError(f"a variable reference in {word!r}")
            out.append("$")
            i += 2
        else:
            out.append(word[i])
            i += 1
    return "".join(out)


def exec_argv(value: str, specifiers: Mapping[str, str]) -> list[str]:
    """The argv systemd runs for an ``Exec*=`` value the emitter wrote."""
    words = split_words(resolve_specifiers(value, specifiers))
    return words[:1] + [expand_dollars(w) for w in words[1:]]
