"""``exedra-engine inspect``: a GGUF model's metadata, read from its header."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._core.values import ModelInfo
from exedra_engine._shell.inspect import read_model
from exedra_engine.cli.parser import Subparsers
from exedra_engine.cli.render import Report, shown, size_or_unknown


def add_parser(sub: Subparsers) -> None:
    s = sub.add_parser("inspect", help="read a GGUF model's metadata from its header")
    s.add_argument("path", help="GGUF file")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=inspect_command)


def inspect_command(a: argparse.Namespace) -> Report:
    m = read_model(a.path)
    return Report(m, _lines(m))


def _lines(m: ModelInfo) -> Iterator[str]:
    yield f"path          {shown(m.path)} ({size_or_unknown(m.size)})"
    yield f"architecture  {shown(m.architecture)}"
    yield f"name          {shown(m.name or '-')}"
    yield f"quant         {shown(m.quant or '-')}"
    yield f"blocks        {m.blocks}"
    yield f"context       {m.context}"
    if isinstance(m.chat_template, int):
        yield "chat template " + (
            f"yes ({m.chat_template:,} bytes)"
            if m.chat_template
            else f"none ({LLAMA.binary} formats chat in {LLAMA.chat_fallback}: ask "
            f"{LLAMA.completions_path}, or name a template with --chat-template)"
        )
    if isinstance(m.tuning, str):
        yield f"tuning        {m.tuning or 'unknown (the header does not say)'}"
