"""``exedra-engine config --check`` and ``config --schema``."""

from __future__ import annotations

import argparse
import os
import sys

from returns.result import Failure, Success

from exedra_engine._core.check import TableOrigin, bundled_origin, has_errors
from exedra_engine._core.executors import profiles
from exedra_engine._core.flags import FlagTable
from exedra_engine._shell.check import check_config
from exedra_engine.cli.render import fail, finding_line, findings_summary, print_json, shown
from exedra_engine.constants import DEFAULT_CONFIG_PATH


def judging_tables(a: argparse.Namespace) -> tuple[dict[str, FlagTable], list[TableOrigin]]:
    """The table each kind is judged by, and where each came from."""
    return {}, [bundled_origin(p.kind) for p in profiles()]


def run_check(a: argparse.Namespace) -> int:
    """Exit 0 when the files are clean, 1 on findings that fail (errors; with ``--strict``
    warnings too), 2 when a file cannot be read or is one the loader refuses."""
    tables, origins = judging_tables(a)
    match check_config(a.path, tables=tables):
        case Failure(err):
            return fail(err)
        case Success(report):
            pass
    if a.json:
        print_json(report.findings)
        for o in origins:
            print(f"judged by {shown(o.describe())}", file=sys.stderr)
    else:
        for f in report.findings:
            print(finding_line(f))
        where = shown(os.fsdecode(a.path or DEFAULT_CONFIG_PATH))
        n = len(report.files)
        print(
            f"{where}: {n} file{'s' * (n != 1)}, {findings_summary(report.findings)}"
            + (" (--strict: warnings fail)" if a.strict else "")
        )
        for o in origins:
            print(f"judged by {shown(o.describe())}")
    if report.invalid:
        return 2
    return 1 if has_errors(report.findings, strict=a.strict) else 0


def print_schema() -> int:
    raise NotImplementedError
