"""The parser every command is added to: argparse with the safety rules of a tool that is
handed keys, sized without importing shutil, and its parse errors (did-you-mean, unknown
arguments counted, never echoed)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

from exedra_engine.cli import options
from exedra_engine.cli.render import shown


def _columns() -> int:
    """`shutil.get_terminal_size().columns`, without importing shutil (2 ms of a cold start,
    with its zlib, bz2 and lzma): $COLUMNS, else the terminal on stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class Formatter(argparse.HelpFormatter):
    # argparse makes one of these for every add_argument; its own sizes itself with shutil.
    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        width = _columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)


class Parser(argparse.ArgumentParser):
    """argparse with three safety rules for a tool that is handed keys.

    - No abbreviations: ``--api-key K`` (llama-server's own flag, what a user types) must not
      be read as ``--api-key-env K`` and the key echoed as a variable's name; ``--ct`` is not
      ``--ctx``.
    - No value is echoed in a parse error: an option given the wrong kind of value is named,
      the value is not (it may be a key typed in the wrong place). Unknown options are named
      with a did-you-mean; the values that follow them are counted, not shown.
    - An executor's key flag (``--api-key``, ``--hf-token``) given to the CLI gets its own
      answer: keys travel in variables (``--api-key-env VAR``), never in argv.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", Formatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        # A subcommand judges its own leftovers, so a did-you-mean draws on its options.
        if extras and self._subparsers is None:
            self.error(unknown_arguments(extras, self._option_string_actions))
        return ns, extras

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError:
            if getattr(action.type, "__module__", "") == options.__name__:
                raise  # its message quotes the value only when it is no key (cli/options.py)
            kind = getattr(action.type, "__name__", "")
            what = getattr(action.type, "expected", "") or {
                "int": "an integer",
                "float": "a number",
            }.get(kind, "a valid value")
            raise argparse.ArgumentError(
                action, f"expected {what} (the value given is not shown)"
            ) from None

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            hint = did_you_mean_hint(str(value), choices)
            raise argparse.ArgumentError(
                action, f"choose from {', '.join(choices)}{hint} (the value given is not shown)"
            )

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # CPython 3.11's argparse strips an explicit "--" value (``--arg=--``) and hands the
        # action an empty list where a string belongs: a traceback further on. The value is
        # the string "--", as later Pythons read it.
        given = list(arg_strings)
        value = super()._get_values(action, arg_strings)
        if action.option_strings and action.nargs is None and given == ["--"] and value == []:
            value = self._get_value(action, "--")
            self._check_value(action, value)
        return value

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse swallows a failed write (--help into a closed pipe or /dev/full would exit
        # 0 having printed nothing); main() reports it like any other failed write.
        if message:
            (file or sys.stderr).write(message)

    def error(self, message: str) -> NoReturn:
        # argparse quotes the offending argument as given; one line whatever it contains.
        self.exit(2, f"{self.prog}: error: {shown(message)}\n")


def did_you_mean_hint(given: str, known: Sequence[str]) -> str:
    """``; did you mean --ctx?`` when one known name is close to `given`, else ""."""
    import difflib

    close = difflib.get_close_matches(given, known, n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def unknown_arguments(extras: Sequence[str], options: Mapping[str, object]) -> str:
    """The parse error for arguments no option took: the options are named (with a
    did-you-mean), the values are only counted, since a value may be a key."""
    from exedra_engine._core.executors.builtin import BUILTIN

    names = [t.partition("=")[0] for t in extras if t.startswith("-") and len(t) > 1]
    values = len(extras) - len(names)
    keys = [n for n in names if BUILTIN.is_secret_flag(n)]
    if keys:
        return (
            f"{keys[0]}: keys are not taken on the command line (argv shows in ps and shell "
            "history); put the key in a variable and pass --api-key-env VAR"
        )
    parts = []
    for n in names:
        parts.append(f"unrecognized option {n}{did_you_mean_hint(n, sorted(options))}")
    if values:
        parts.append(f"{values} unexpected value{'s' if values > 1 else ''} (not shown)")
    return "; ".join(parts)


Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"
"""What each command module's ``add_parser(sub)`` is given: `build_parser`'s subcommands."""
