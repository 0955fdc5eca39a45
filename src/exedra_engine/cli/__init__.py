"""The ``exedra-engine`` command line: probe, inspect, config, plan, emit, launch, demo.

Every command prints a short readable summary, or with ``--json`` the value as JSON.
Exit status: 0 success, 1 a failure at run time (the executor crashed or never became
ready), 2 bad input (usage, config, model, plan), each with a one-line message on stderr.
API keys are read from an environment variable (``--api-key-env``), never from argv, and
are printed redacted unless ``--show-secrets``, in every output: where they stand (key flags,
key variables, secret-named variables), never by searching text for them.

Output never fails on what it prints: human text escapes control characters and lone
surrogates (``\\x1b``, ``\\udcff``: a GGUF name cannot clear the terminal or forge a line);
JSON writes lone surrogates (undecodable bytes of a path, as Python's ``surrogateescape`` holds
them) as ``\\udcXX`` escapes, so the output is valid UTF-8 JSON under any locale. A failed
write of stdout (a full disk, ``/dev/full``) is a one-line error with exit 1; a closed pipe
exits 0 quietly (the reader stopped reading: ``| head -1``).

A module per command (cli/probe/, cli/plan/, ...) adds its parser (``add_parser(sub)``)
and holds its handler, which returns an exit status or a `Report` that `show` prints as text
or JSON. Here: the parser's assembly, `main` and `run`, and the exit status of each error.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._version import __version__
from exedra_engine.cli import (
    completion,
    config,
    demo,
    emit,
    inspect,
    launch,
    plan,
    probe,
    wait_ready,
)
from exedra_engine.cli.parser import Parser, Subparsers
from exedra_engine.cli.render import PROG, Report, fail, hide_values, show, shown
from exedra_engine.errors import EngineError, LaunchError, NotReady


def build_parser(
    executors: Executors = BUILTIN, *, only: str | None = None
) -> argparse.ArgumentParser:
    """The command line, knowing `executors` (its commands find them as ``args.executors``).

    With `only` (a command's name), the parser of that command alone: what parsing a command
    line that names it needs. Each sub-parser argparse builds costs its options and three
    gettext lookups (the first imports `locale`): a cold ``plan --json`` builds two, not ten."""
    p = Parser(
        prog=PROG,
        description="Plan and launch local AI model executors "
        f"({', '.join(p.binary for p in BUILTIN)}).",
        epilog="Exit status: 0 ok, 1 run-time failure, 2 bad input.",
    )
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)

    for name, add in _COMMANDS:
        if only is None or only == name:
            add(sub)
    if only is None:
        completion.add_parser(sub, p)  # it completes the whole command line
    if executors is not BUILTIN:
        _use_executors(p, executors)
    p.set_defaults(executors=executors)
    return p


_COMMANDS: tuple[tuple[str, Callable[[Subparsers], None]], ...] = (
    ("probe", probe.add_parser),
    ("inspect", inspect.add_parser),
    ("config", config.add_parser),
    ("plan", plan.add_parser),
    ("emit", emit.add_parser),
    ("wait-ready", wait_ready.add_parser),
    ("launch", launch.add_parser),
    ("demo", demo.add_parser),
)
"""Each command and what adds its parser, in the order ``--help`` lists them (completion
last: it is handed the whole command line)."""
_NAMES = frozenset(name for name, _ in _COMMANDS)


def main(argv: Sequence[str] | None = None, *, executors: Executors = BUILTIN) -> int:
    """Entry point of the ``exedra-engine`` script. `executors` are the executors its
    commands know (``--kind``, probing, planning, launching, emitting, checking)."""
    from exedra_engine.cli.signals import ending

    with ending():  # SIGTERM ends any command as SIGINT does, from its first line
        return _main(argv, executors)


def _main(argv: Sequence[str] | None, executors: Executors) -> int:
    try:
        try:
            given = sys.argv[1:] if argv is None else argv
            # A command named first needs its own parser only; anything else (a bare call,
            # --help, a mistyped command, completion) gets the whole command line.
            only = given[0] if given and given[0] in _NAMES else None
            parser = build_parser(executors, only=only)
            if not given:
                # A bare call: the usage and the commands, not only "COMMAND is required".
                parser.print_help(sys.stderr)
                raise SystemExit(2)
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help, --version, a usage error: argparse printed it
            sys.stdout.flush()  # here, so a failed write is handled like any other
            return e.code if isinstance(e.code, int) else 2 if e.code else 0
        hide_values(_given_values(parser, args), by_look=not getattr(args, "show_secrets", False))
        from exedra_engine._shell import notice

        notice.hook = _note
        result: int | Report = args.func(args)
        code = result if isinstance(result, int) else show(result, args.json)
        sys.stdout.flush()
    except KeyboardInterrupt as e:
        from exedra_engine.cli.signals import exit_line

        return exit_line(e)
    except BrokenPipeError:
        # The reader closed the pipe (`| head -1`, `| true`): it has what it wanted, which is
        # not a failure (a `set -o pipefail` step must not fail on it).
        _drop_stdout()
        return 0
    except OSError as e:
        if not _is_stdout_error(e):
            raise
        _drop_stdout()
        print(f"{PROG}: error: cannot write: {e.strerror or e}", file=sys.stderr)
        return 1
    except EngineError as e:
        # Every expected failure, raised where it is found: one line, its class's status.
        return fail(e, exit_status(e))
    return code


EXIT_STATUS: tuple[tuple[type[EngineError], int], ...] = (
    (NotReady, 1),
    (LaunchError, 1),
    (EngineError, 2),
)
"""The exit status of each error class, the first that matches: 1 for a failure at run time
(the executor could not start, crashed or never became ready), 2 for bad input (usage,
config, model, hardware file, plan)."""


def _use_executors(parser: argparse.ArgumentParser, executors: Executors) -> None:
    """The choices of ``--kind`` and ``--capability`` from `executors` (the parser is built
    with the built-in ones)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _use_executors(sub, executors)
        elif action.dest == "kind" and action.choices is not None:
            action.choices = list(executors.kinds)
        elif action.dest == "capability" and action.choices is not None:
            action.choices = sorted({c for p in executors for c in p.capabilities})


def exit_status(e: EngineError) -> int:
    return next(code for cls, code in EXIT_STATUS if isinstance(e, cls))


def run() -> NoReturn:
    """The ``exedra-engine`` script and ``python -m exedra_engine``: `main`, then leave at once.

    The interpreter's orderly teardown of the ~130 modules a plan loads costs ~10 ms of CPU,
    a sixth of a cold ``plan --json``, and serves nothing here: the command registers no
    exit handler and holds no open file but stdout and stderr, flushed first. Called
    in-process (tests, embedding), `main` returns as any function does."""
    code = main()
    for stream in (sys.stdout, sys.stderr):
        # A failed write was reported by main; a closed or replaced stream has nothing left.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)


# Options whose values are the executor's own argv and env: their secrets are redacted where
# they stand (key flags, key variables), by the same rules as every plan output.
_EXECUTOR_ARGV = frozenset({"arg", "run_arg", "env"})


def _given_values(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """Each string the command line gave an option or operand, with the option's name."""
    actions = list(parser._actions)
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            chosen = a.choices.get(getattr(args, a.dest, None) or "")
            actions += chosen._actions if chosen is not None else []
    given: dict[str, str] = {}
    for a in actions:
        if a.dest in _EXECUTOR_ARGV or a.nargs == 0 or a.choices is not None:
            continue  # a choice was checked against known words: it is no key
        value = getattr(args, a.dest, None)
        label = a.option_strings[-1] if a.option_strings else a.metavar or a.dest
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str):
                given[v] = str(label)
    return given


def _note(message: str) -> None:
    print(f"{PROG}: note: {shown(message)}", file=sys.stderr, flush=True)


def _is_stdout_error(e: OSError) -> bool:
    # A write that failed for lack of room or a broken device: stdout (a full disk,
    # /dev/full) is the file the CLI writes. Any other OSError is a bug to report.
    return e.errno in _WRITE_ERRNOS


_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def _drop_stdout() -> None:
    # Python flushes stdout again at exit; what could not be written is thrown away so that
    # it does not fail a second time with "Exception ignored ...".
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # not a real file (a test's StringIO)
        pass


if __name__ == "__main__":
    run()
