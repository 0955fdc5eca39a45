"""``exedra-engine completion bash|zsh``: a shell completion script made by shtab from the
parser itself, with the options that take paths marked to complete files or directories."""

from __future__ import annotations

import argparse
import sys

from exedra_engine.cli.parser import Subparsers


def add_parser(sub: Subparsers, whole: argparse.ArgumentParser) -> None:
    """Add ``completion``; `whole` is the command line it completes (the one `sub` is in)."""
    s = sub.add_parser(
        "completion",
        help="print a shell completion script (bash: source it, or save it as "
        "~/.local/share/bash-completion/completions/exedra-engine; zsh: save it as "
        "_exedra-engine in a directory of $fpath)",
    )
    s.add_argument("shell", choices=["bash", "zsh"], help="the shell")

    def run(a: argparse.Namespace) -> int:
        return completion_command(whole, a)

    s.set_defaults(func=run)


def completion_command(whole: argparse.ArgumentParser, a: argparse.Namespace) -> int:
    import shtab

    _mark_paths(whole)
    sys.stdout.write(shtab.complete(whole, shell=a.shell))
    return 0


# What the options and operands complete to (shtab's own markers, spelt out so that building
# the parser for every other command does not import shtab): files (and directories on the
# way to them), or directories only.
_FILE = {"bash": "_shtab_compgen_files", "zsh": "_files", "tcsh": "f"}
_DIR = {"bash": "_shtab_compgen_dirs", "zsh": "_files -/", "tcsh": "d"}
_PATHS = {
    "model": _FILE,
    "path": _FILE,
    "config": _FILE,
    "hardware": _FILE,
    "executor": _FILE,
    "plan": _FILE,
    "log_file": _FILE,
    "key_file": _FILE,
    "out": _DIR,
    "models_dir": _DIR,
}


def _mark_paths(parser: argparse.ArgumentParser) -> None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _mark_paths(sub)
        elif action.dest in _PATHS:
            action.complete = _PATHS[action.dest]  # type: ignore[attr-defined]
