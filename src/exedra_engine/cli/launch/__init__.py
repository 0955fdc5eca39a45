"""``exedra-engine launch``: run a plan until Ctrl-C or SIGTERM, then stop it cleanly.

SIGINT and SIGTERM are honoured in every phase, not only once the executor serves:

- planning (synchronous: probing, reading overrides): `Signals` turns the signal into
  `Interrupted`, which unwinds (killing a ``--version`` child that hangs) and exits 128+N;
- spawning and loading: the first signal cancels the launch, which kills the executor that
  never served anyone, and the command exits 128+N with one line saying so;
- serving: the first signal stops the executor (SIGTERM, then SIGKILL after
  ``--stop-timeout``); the command prints ``stopped ...`` and exits 0 after a clean stop;
- stopping: later signals are consumed, the stop under way is already bounded by
  ``--stop-timeout``, so the ``stopped`` line and the exit status are kept.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from exedra_engine._core.config.findings import Finding, TableOrigin
from exedra_engine.cli import options
from exedra_engine.cli.launch.launch_output import log_sink, not_runnable_here, refusal
from exedra_engine.cli.parser import Subparsers
from exedra_engine.cli.plan import cpu_note, hide_findings
from exedra_engine.cli.plan.request import add_plan_options, planned
from exedra_engine.cli.render import PROG, fail, findings_heading
from exedra_engine.constants import STOP_TIMEOUT
from exedra_engine.errors import EngineError


def add_parser(sub: Subparsers) -> None:
    s = sub.add_parser("launch", help="plan, launch, wait until ready; Ctrl-C stops it")
    add_plan_options(s, model_required=False)
    s.add_argument(
        "--group",
        metavar="FILE",
        help="launch every member of a group file at once (planned as plan --group plans "
        "them, each checked as launch checks its one plan: nothing starts if one is refused), "
        "all or nothing; each member's ready lines and log as launch's (its log lines "
        "prefixed with its id where they are shown), Ctrl-C stops them all (a group plan "
        "saved with plan --group --json is launched as saved, planned no more)",
    )
    s.add_argument(
        "--router",
        action="store_true",
        help="with --group: run the llama members as one llama.cpp router (--models-preset), "
        "ready when /models answers, each model loaded on its first request",
    )
    s.add_argument(
        "--ready-timeout",
        type=options.seconds,
        default=None,
        metavar="S",
        help="seconds to wait for readiness (default: the load budget of the model's size, "
        "shown on plan's load line)",
    )
    s.add_argument(
        "--stop-timeout",
        type=options.seconds,
        default=STOP_TIMEOUT,
        metavar="S",
        help=f"SIGTERM grace period before SIGKILL (default {STOP_TIMEOUT:g})",
    )
    s.add_argument(
        "--drain",
        type=options.seconds_or_zero,
        default=0.0,
        metavar="S",
        help="on Ctrl-C or SIGTERM, first wait up to S seconds until the executor answers no "
        "request (default 0: stop at once)",
    )
    shown = s.add_mutually_exclusive_group()
    shown.add_argument(
        "--quiet",
        action="store_true",
        help="do not show the executor's log, even when stderr is no terminal (it is kept in "
        "a file the ready line names; its last lines still explain a failure)",
    )
    shown.add_argument(
        "--verbose",
        action="store_true",
        help="show the executor's log on stderr; by default it is shown only when stderr is "
        "no terminal (a journal), and kept in a file the ready line names on a terminal",
    )
    s.add_argument(
        "--log-file",
        type=options.log_file,
        metavar="FILE",
        help="append the executor's log to FILE instead (keys redacted)",
    )
    s.set_defaults(func=launch_command, explain=False, strict=False, measure=False)


def launch_command(a: argparse.Namespace) -> int:
    from exedra_engine.cli.signals import Interrupted, Signals, interrupted_exit

    if a.group is not None:
        return _launch_group(a)
    if a.router:
        raise EngineError("--router runs a group's llama members: give --group FILE")
    missing = [f for f, v in (("--model", a.model), ("--kind", a.kind)) if v is None]
    if missing:
        raise EngineError(
            f"launch: the following arguments are required: {', '.join(missing)} "
            "(or --group FILE, whose members name their models)"
        )
    # `plan` allows an absent model (planning for another machine); a launch cannot succeed
    # without one, and is refused before anything is started.
    if not os.path.isfile(a.model):
        why = (
            "is a directory"
            if os.path.isdir(a.model)
            else "is not a regular file (a FIFO, a socket or a device)"
            if os.path.exists(a.model)
            else "does not exist"
        )
        raise EngineError(f"--model {a.model}: {why}; launch needs the model file on this host")
    # Signals are honoured from here on, planning included (the phases above).
    with Signals().installed() as sigs:
        try:
            from exedra_engine.cli.launch.launch_run import run_launch

            # Judged by the binary that is about to start (its own --help, cached per
            # binary): a flag it refuses stops the launch here, not after the executor's
            # start-up, with the layer that set it.
            _, e, origin = planned(a, live=True)
            if a.hardware and (why := not_runnable_here(e.plan.command)):
                raise EngineError(
                    f"--hardware {a.hardware}: its executor {e.plan.command} {why} on this "
                    "host; launch starts the executor here (that file describes the host it "
                    "was probed on): drop --hardware, or name a binary with --executor PATH"
                )
            e = hide_findings(e, a.show_secrets, a.executors)
            if (refused := _judged(a, e.findings, origin)) is not None:
                return refused
        except Interrupted as i:
            return interrupted_exit(i.signum, "planning", "nothing was started")
        # Only where the executor's start-up warning is seen: its log on stderr.
        if not log_sink(a, e.plan).path and (note := cpu_note(e.plan, a.executors)):
            print(f"{PROG}: note: {note}", file=sys.stderr)  # before the executor's logs
        return run_launch(e.plan, a, sigs, e.sources)


def _judged(a: argparse.Namespace, findings: Sequence[Finding], origin: TableOrigin) -> int | None:
    """Exit 2 (said) when the binary's own table refuses a flag: nothing is started; else
    None, the findings summed up in a warning."""
    if refused := refusal(findings, origin):
        return fail(refused, 2, as_json=a.json)  # a usage error: nothing started
    if findings:
        print(
            f"{PROG}: {findings_heading(findings)} in what this plan passes on, "
            f"judged by {origin.describe()}; plan --explain lists them",
            file=sys.stderr,
        )
    return None


def _launch_group(a: argparse.Namespace) -> int:
    """``launch --group FILE``: the options a group file sets per member are refused as
    ``plan --group`` refuses them; then planned and run (cli/launch/launch_group.py)."""
    from exedra_engine.cli.launch.launch_group import launch_group
    from exedra_engine.cli.plan.plan_group import refuse_per_member
    from exedra_engine.cli.signals import Interrupted, Signals, interrupted_exit

    refuse_per_member(a)
    if a.drain and not a.router:
        raise EngineError(
            "--drain does not go with --group: the members are stopped together, in "
            "parallel, each within --stop-timeout (--router drains the one router)"
        )
    with Signals().installed() as sigs:
        try:
            return launch_group(a, sigs)
        except Interrupted as i:
            return interrupted_exit(i.signum, "planning", "nothing was started")
