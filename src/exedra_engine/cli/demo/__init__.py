"""``exedra-engine demo``: the whole path on an embedded default, with nothing to configure.

Its run (cli/demo/demo_run.py) is imported once signals are honoured: loading trio and the
launcher takes long enough for a Ctrl-C to come during it."""

from __future__ import annotations

import argparse

from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine.cli.parser import Subparsers


def add_parser(sub: Subparsers) -> None:
    s = sub.add_parser(
        "demo",
        help=f"generate a tiny model, launch a real {LLAMA.binary} on it, "
        "ask it one question, stop it",
    )
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--question", default="Say hello.", help="what to ask")
    s.set_defaults(func=demo_command)


def demo_command(a: argparse.Namespace) -> int:
    from exedra_engine.cli.signals import Interrupted, Signals, interrupted_exit

    with Signals().installed() as sigs:
        try:
            from exedra_engine.cli.demo.demo_run import run_demo
        except Interrupted as i:
            return interrupted_exit(i.signum, "planning", "nothing was started")
        return run_demo(a, sigs)
