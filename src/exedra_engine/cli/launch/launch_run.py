"""The run of ``launch`` once planned: start the executor under trio, show its load, print
what is ready (cli/launch/launch_output.py), send its log where asked, stop it on a signal (the
phases: cli/launch/__init__.py)."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence
from typing import IO, Final

import trio

from exedra_engine._core.launch.budget import load_limits
from exedra_engine._core.launch.progress import SHOW_AFTER, LoadProgress, bar, new_step
from exedra_engine._core.launch.progress import progress_line as _line
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.plan.provenance import Source
from exedra_engine._shell.launch.load_progress import Sampler, child_running, plan_files, read_proc
from exedra_engine._trio.launcher import Instance, start_instance
from exedra_engine.cli.launch.launch_output import LogSink, log_sink, ready_lines
from exedra_engine.cli.signal_scope import signal_watch
from exedra_engine.cli.signals import Signals, interrupted_exit
from exedra_engine.errors import EngineError, LaunchError

PROGRESS_EVERY: Final = 10.0
"""Seconds between our own ``loading`` lines when no new 10 % step was reached (a load whose
size is unknown, or an executor warming up after its model is in), so it does not look hung."""
SAMPLE_EVERY: Final = 0.25
"""Seconds between two samples of the load (a few reads of /proc)."""


def run_launch(
    plan: LaunchPlan,
    a: argparse.Namespace,
    sigs: Signals,
    sources: Sequence[Source] = (),
    *,
    tries: Sequence[str] | None = None,
) -> int:
    """Launch `plan`, print its endpoint, forward its logs, stop it on a signal. `tries`: the
    curl commands its ready lines give (a router's: one per model it serves).

    Exit status: 0 when it was stopped cleanly, 1 when it crashed or never became ready,
    128+N when signal N came before it was ready (nothing is left running).
    """
    sigs.raising = False
    if sigs.first is not None:
        return interrupted_exit(sigs.first, "planning", "nothing was started")
    sink = log_sink(a, plan)
    log_file: IO[bytes] | None = None
    if sink.path:
        # --log-file is appended to; the kept log holds this launch only. Keys are redacted
        # in both.
        what = "--log-file" if a.log_file else f"the log {sink.path}"
        try:
            log_file = open_log(sink.path, what, fresh=not a.log_file)
        except LaunchError as e:
            from exedra_engine.cli.render import fail

            return fail(e)
    try:
        main = functools.partial(_main, tries=tries)
        return trio.run(main, plan, a, sigs, log_file, tuple(sources))
    finally:
        if log_file is not None:
            log_file.close()


def open_log(path: str, what: str, *, fresh: bool = False) -> IO[bytes]:
    """`path` opened to append the executor's log to: made 0600, and never blocking: signals
    are only recorded from here on, so an open(2) of a FIFO waiting for a reader would be
    retried after each, for good. `fresh`: its directory made and the file emptied (a log of
    this launch only). `LaunchError` naming `what` when it cannot be."""
    from exedra_engine._shell.local.files import open_append

    f: IO[bytes] | None = None
    try:
        if fresh:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        f = open_append(path)
        if fresh:
            f.truncate(0)
    except OSError as e:  # unwritable: checked at parse for what could be
        if f is not None:
            f.close()
        raise LaunchError(f"{what}: cannot open it: {e.strerror or e}") from None
    return f


async def _main(
    plan: LaunchPlan,
    a: argparse.Namespace,
    sigs: Signals,
    log_file: IO[bytes] | None,
    sources: tuple[Source, ...],
    *,
    tries: Sequence[str] | None,
) -> int:
    from exedra_engine.cli.render import PROG
    from exedra_engine.cli.render import fail as _fail

    sink = log_sink(a, plan)
    logs = log_file if log_file is not None else sys.stderr.buffer
    inst: Instance | None = None
    async with signal_watch(sigs) as (nursery, phase):
        with phase:
            failed: EngineError | None = None
            async with trio.open_nursery() as progress:
                budget = load_limits(plan, a.ready_timeout).budget
                # A bar rewritten in place only where no log line can land in it.
                bar_ok = sys.stderr.isatty() and bool(sink.path)
                progress.start_soon(_progress, plan, budget, bar_ok)
                try:
                    started = await start_instance(
                        nursery,
                        plan,
                        logs,
                        ready_timeout=a.ready_timeout,
                        stop_timeout=a.stop_timeout,
                        sources=sources,
                        executors=a.executors,
                    )
                except EngineError as err:
                    failed = err
                progress.cancel_scope.cancel()
            if failed is not None:
                nursery.cancel_scope.cancel()
                if sink.path and not a.json:
                    print(f"{PROG}: the executor's whole log: {sink.path}", file=sys.stderr)
                return _fail(failed, 1, as_json=a.json)
            inst = started
            _say_ready(started, a, sink, tries)
            await started.wait()
        if inst is not None:
            await inst.stop(a.stop_timeout, drain=a.drain)  # shielded; at once if it already exited
        nursery.cancel_scope.cancel()
    if inst is None:
        assert sigs.first is not None
        return interrupted_exit(sigs.first, "starting", "the executor was stopped")
    reason = inst.exit_reason
    assert reason is not None
    print(f"stopped   {reason.describe()}", file=sys.stderr)
    return 0 if reason.clean else 1


def _say_ready(
    started: Instance, a: argparse.Namespace, sink: LogSink, tries: Sequence[str] | None
) -> None:
    """The ready lines (or the ready JSON) on stdout, the plan's warnings on stderr."""
    from exedra_engine.cli.render import PROG, json_text, memory_lines, shown, shown_plan

    plan = started.plan
    if a.json:
        body = {
            "url": started.endpoint.url,
            "pid": started.pid,
            "plan": shown_plan(plan, a.show_secrets, executors=a.executors),
            "actual": started.actual,
        }
        sys.stdout.write(json_text(body, indent=False) + "\n")
    else:
        mem = memory_lines(plan.memory) if plan.memory else []
        for line in ready_lines(
            plan,
            url=started.endpoint.url,
            pid=started.pid,
            sink=sink,
            executors=a.executors,
            memory=mem,
            tries=tries,
        ):
            print(shown(line))
    sys.stdout.flush()
    for warning in started.actual.warnings if started.actual else ():
        print(f"{PROG}: warning: {shown(warning)}", file=sys.stderr)


async def _progress(plan: LaunchPlan, timeout: float, tty: bool) -> None:
    """The load, shown once it takes longer than `SHOW_AFTER`: a bar rewritten in place on a
    terminal, else a line at each 10 % step of the model's bytes (`Sampler`: mapped or read by
    the executor, of the bytes the plan's files hold), and a line every `PROGRESS_EVERY` s
    without a new step, so a silent load (or one whose logs are kept in a file) never looks
    hung."""
    from exedra_engine.cli.render import shown

    name = shown(plan.command.rsplit("/", 1)[-1])
    paths, total = plan_files(plan)
    start = trio.current_time()
    sampler: Sampler | None = None
    last_step: int | None = None
    last_line = 0.0
    drawn = False
    try:
        while True:
            await trio.sleep(SAMPLE_EVERY)
            now = trio.current_time() - start
            if sampler is not None and read_proc(f"/proc/{sampler.pid}/stat") is None:
                sampler = None  # gone (a port retry starts another)
            if sampler is None and (pid := child_running(plan.command)):
                sampler = Sampler(pid, paths, total)
            p = sampler.sample(now) if sampler else LoadProgress(done=0, total=total, elapsed=now)
            if now < SHOW_AFTER:
                continue
            waiting = f"; waiting for {plan.ready}" if p.total and p.fraction >= 1 else ""
            if tty:
                sys.stderr.write(f"\r\033[Kloading   {name} {bar(p)}{waiting}")
                sys.stderr.flush()
                drawn = True
            elif (s := new_step(last_step, p)) is not None:
                last_step, last_line = s, now
                print(f"loading   {name} {_line(p)}{waiting}", file=sys.stderr, flush=True)
            elif now - last_line >= PROGRESS_EVERY:
                last_line = now
                print(
                    f"loading   {name} has not answered {plan.ready} yet: {now:.1f} s of "
                    f"--ready-timeout {timeout:g} s",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if drawn:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
