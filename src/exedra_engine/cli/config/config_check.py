"""``exedra-engine config --check`` and ``config --schema``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import msgspec

from exedra_engine._core.config.findings import Finding, TableOrigin, bundled_origin, has_errors
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import Executors
from exedra_engine._shell.config_check import judge_config
from exedra_engine._shell.local.flag_tables import executor_table
from exedra_engine._shell.probe import host_hardware
from exedra_engine.cli.render import finding_line, findings_summary, print_json, shown
from exedra_engine.constants import DEFAULT_CONFIG_PATH
from exedra_engine.errors import EngineError


def named_executors(specs: Sequence[str], executors: Executors = BUILTIN) -> dict[str, str]:
    """``--executor [KIND=]PATH`` values by kind: the kind given, or the one whose binary the
    file is named after (``/opt/b6000/llama-server``)."""
    out: dict[str, str] = {}
    kinds = executors.kinds
    for spec in specs:
        kind, eq, path = spec.partition("=")
        if not eq or kind not in kinds:
            path = spec
            name = os.path.basename(path)
            found = [
                p.kind for p in executors if name == p.binary or name.startswith(p.binary + "-")
            ]
            if not found:
                known = ", ".join(f"{p.kind}=PATH" for p in executors)
                raise EngineError(
                    f"--executor {spec}: cannot tell its kind from its name; write {known}"
                )
            kind = found[0]
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            raise EngineError(f"--executor {spec}: {path} is not an executable file")
        out[kind] = path
    return out


def judging_tables(
    named: dict[str, str], kinds: Sequence[str] | None = None, executors: Executors = BUILTIN
) -> tuple[dict[str, FlagTable], list[TableOrigin]]:
    """The table each kind (of `kinds`, default all) is judged by, and where each came from:
    the binary named for it, else the one installed on PATH, read by its own ``--help``;
    the bundled table when there is neither."""
    hw = (
        host_hardware(executors=executors)
        if any(k not in named for k in kinds or executors.kinds)
        else None
    )
    tables: dict[str, FlagTable] = {}
    origins: list[TableOrigin] = []
    for p in executors:
        if kinds is not None and p.kind not in kinds:
            continue
        installed = hw.executor(p.kind) if hw else None
        path = named.get(p.kind) or (installed.path if installed else "")
        if not path:
            origins.append(bundled_origin(p, "not installed"))
            continue
        tables[p.kind], origin = executor_table(p, path)
        origins.append(origin)
    return tables, origins


def run_check(a: argparse.Namespace) -> int:
    """Exit 0 when the files are clean, 1 on findings that fail (errors; with ``--strict``
    warnings too), 2 when a file cannot be read or is one the loader refuses."""
    ex: Executors = a.executors
    tables, origins = judging_tables(named_executors(a.executor, ex), executors=ex)
    report = judge_config(a.path, tables=tables, executors=ex)
    if not getattr(a, "show_secrets", False):
        report = msgspec.structs.replace(report, findings=_shown(report.findings, a.path, ex))
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
    """The JSON Schema of override files, for editors and CI (see docs/how-to/lint-overrides.md)."""
    from exedra_engine._core.config.schema import config_schema

    print_json(config_schema())
    return 0


def _shown(findings: tuple[Finding, ...], path: str, ex: Executors) -> tuple[Finding, ...]:
    """The findings with the files' secrets hidden where they quote them (a key after a
    mistyped ``--api-kee``, ``--temp=KEY``), and whatever is secret by its look."""
    from exedra_engine._core.config.findings import shown_findings
    from exedra_engine._core.config.overrides import config_secrets
    from exedra_engine._shell.load_config import load_config

    cfg = load_config(path, executors=ex).value_or(None)
    secrets = config_secrets(cfg, executors=ex) if cfg is not None else frozenset()
    return shown_findings(findings, secrets)
