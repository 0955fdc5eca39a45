"""``exedra-engine config``: the merged admin overrides; ``--check`` judges them by the
executors' flags (cli/config/config_check.py), ``--schema`` prints their JSON Schema."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

import msgspec

from exedra_engine._core.config.overrides import Config, redact_config
from exedra_engine._shell.load_config import read_config
from exedra_engine.cli import options
from exedra_engine.cli.parser import Subparsers
from exedra_engine.cli.render import Report, shown
from exedra_engine.constants import DEFAULT_CONFIG_PATH
from exedra_engine.errors import EngineError


def add_parser(sub: Subparsers) -> None:
    s = sub.add_parser(
        "config",
        help="print the merged admin overrides; --check judges them by the executors' flags, "
        "--schema prints their JSON Schema",
    )
    s.add_argument(
        "path",
        nargs="?",
        default=None,
        type=options.config_file,
        metavar="PATH",
        help=f"file or directory (default {DEFAULT_CONFIG_PATH}, which may be absent)",
    )
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--show-secrets", action="store_true", help="print secret env values")
    s.add_argument(
        "--check",
        action="store_true",
        help="judge the files by the executors' flags; exit 1 on findings, 2 if unreadable",
    )
    s.add_argument(
        "--executor",
        action="append",
        default=[],
        metavar="[KIND=]PATH",
        help="with --check: judge by this binary's own --help (repeatable; the kind is "
        "found from the binary's name unless given)",
    )
    s.add_argument("--strict", action="store_true", help="with --check: warnings fail too")
    s.add_argument("--schema", action="store_true", help="print the JSON Schema of override files")
    s.set_defaults(func=config_command)


def config_command(a: argparse.Namespace) -> int | Report:
    if a.schema:
        from exedra_engine.cli.config.config_check import print_schema

        return print_schema()
    if a.check:
        from exedra_engine.cli.config.config_check import run_check

        return run_check(a)
    if a.executor or a.strict:
        raise EngineError("--executor and --strict go with --check")
    cfg = read_config(a.path, executors=a.executors)
    if not a.show_secrets:
        cfg = redact_config(cfg, executors=a.executors)
    return Report(cfg, _lines(cfg, a.path))


def _lines(cfg: Config, path: str | None) -> Iterator[str]:
    import yaml  # only the text is YAML

    text = yaml.safe_dump(msgspec.to_builtins(cfg), sort_keys=False, default_flow_style=False)
    yield f"# merged from {shown(os.fsdecode(path or DEFAULT_CONFIG_PATH))}"
    yield text.strip() if text.strip() != "{}" else "# (empty)"
