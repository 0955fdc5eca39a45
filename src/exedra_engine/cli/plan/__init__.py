"""``exedra-engine plan``: plan a launch and print it, starting nothing; ``--explain`` says
where each part came from and judges the layers by the executor's flags, ``--strict`` refuses
a plan with findings, ``--emit`` renders it for a service manager (cli/emit.py)."""

from __future__ import annotations

import argparse
import sys

import msgspec

from exedra_engine._core.config.findings import TableOrigin, failing, shown_findings
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.plan.explained import Explained
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.plan.model_findings import MODEL_CODES
from exedra_engine._core.plan.provenance import Source
from exedra_engine._core.secrets import plan_secrets
from exedra_engine._shell.plan import explain_request
from exedra_engine.cli.emit import add_emit_options
from exedra_engine.cli.parser import Subparsers
from exedra_engine.cli.plan.request import add_plan_options, plan_request, planned
from exedra_engine.cli.plan.sources import shown_sources, source_lines
from exedra_engine.cli.render import (
    MEMORY_WORDS,
    PROG,
    finding_line,
    findings_heading,
    findings_summary,
    print_json,
    print_plan,
    shown,
    shown_plan,
)
from exedra_engine.errors import EngineError


def add_parser(sub: Subparsers) -> None:
    s = sub.add_parser(
        "plan",
        help="plan a launch and print it; starts nothing (dry run)",
        epilog=MEMORY_WORDS,
    )
    add_plan_options(s, model_required=False)
    s.add_argument(
        "--group",
        metavar="FILE",
        help="plan the executors a group file lists, together on one host: each member's "
        "plan and its share of memory, CPUs and port (--model and --kind are the file's)",
    )
    s.add_argument(
        "--measure",
        action="store_true",
        help="measure what the executor would reserve with this plan's flags "
        "(llama-fit-params, here, now) and plan with the engine's own figures",
    )
    s.add_argument(
        "--explain",
        action="store_true",
        help="show which layer set each argv option and env variable, and the findings of "
        "the layers, judged by the executor's own --help (with --emit: where each emitted "
        "field came from)",
    )
    s.add_argument(
        "--strict",
        action="store_true",
        help="refuse a plan whose layers have findings (exit 2), judged as with --explain",
    )
    add_emit_options(s, target_flag="--emit")
    emit_group = next(g for g in s._action_groups if g.title == "emit")
    # plan's own --emit has the group-only targets too (emit has no --group: see its help)
    next(x for x in emit_group._group_actions if x.dest == "emit").help = (
        "render the plan for Kubernetes, systemd or Podman Quadlet (with --group also router: "
        "llama.cpp's models preset, and llama-swap: a llama-swap config)"
    )
    s.set_defaults(
        func=plan_command,
        emit_only=tuple(
            (x.dest, x.option_strings[0], x.default)
            for x in emit_group._group_actions
            if x.dest != "emit"
        ),
    )


def plan_command(a: argparse.Namespace) -> int:
    if a.group is not None:
        from exedra_engine.cli.plan.plan_group import plan_group_command

        return plan_group_command(a, hide_findings)
    missing = [f for f, v in (("--model", a.model), ("--kind", a.kind)) if v is None]
    if missing:
        raise EngineError(
            f"plan: the following arguments are required: {', '.join(missing)} "
            "(or --group FILE, whose members name their models)"
        )
    if getattr(a, "emit", None):
        _check_emit(a)
        return _plan_and_emit(a)
    _check_no_emit_options(a)
    _, e, origin = planned(a)
    e = hide_findings(e, a.show_secrets, a.executors)
    if a.strict and failing(e.findings) and not a.explain:
        return findings_verdict(a, e)
    plan = shown_plan(e.plan, a.show_secrets, e.sources, executors=a.executors)
    sources = shown_sources(e, a.show_secrets, a.executors)
    if a.json:
        _print_plan_json(a, plan, sources, e, origin)
    else:
        print_plan(plan, a.executors)
    if a.explain and not a.json:
        _print_explain(sources, e, origin, a.executors)
    return findings_verdict(a, e)


def _check_emit(a: argparse.Namespace) -> None:
    """Refuse what a single plan's --emit does not go with."""
    if a.emit in ("router", "llama-swap"):
        raise EngineError(f"--emit {a.emit} serves several models: give --group FILE")
    if a.json:
        # Ignored before: emit writes files and prints text, so a script reading JSON
        # from `plan --emit ... --json` got "wrote ..." instead.
        raise EngineError(
            "--json does not go with --emit: the emitted files are the output "
            "(plan ... --json > plan.json saves the plan; emit PLAN.json renders it)"
        )


def _check_no_emit_options(a: argparse.Namespace) -> None:
    # An emit option without --emit would be ignored: refused, as config --strict without
    # --check is, so that `plan --out DIR` does not look as if it wrote something.
    given = [opt for dest, opt, default in a.emit_only if getattr(a, dest) != default]
    if given:
        raise EngineError(
            f"{', '.join(given)} go{'es' * (len(given) == 1)} with --emit "
            "(plan ... --emit k8s|systemd|quadlet); without it nothing is emitted"
        )


def _print_plan_json(
    a: argparse.Namespace,
    plan: LaunchPlan,
    sources: list[Source],
    e: Explained,
    origin: TableOrigin,
) -> None:
    if not a.explain:
        print_json(plan)
        return
    print_json(
        {
            "plan": plan,
            "sources": sources,
            "findings": e.findings,
            "flag_table": origin,
            "memory": e.memory,
        }
    )


def hide_findings(e: Explained, show_secrets: bool, executors: Executors = BUILTIN) -> Explained:
    """`e` with every long key (`SHORT_KEY` characters or more) hidden in its findings,
    which quote the tokens they judge as free text: a caller's ``--arg=--temp=KEY`` is
    worded back. A shorter key stands where the checker says, redacted there."""
    if show_secrets or not e.findings:
        return e
    secrets = plan_secrets(e.plan.args, e.plan.env, executors=executors)
    return msgspec.structs.replace(e, findings=shown_findings(e.findings, secrets))


def _print_explain(
    sources: list[Source], e: Explained, origin: TableOrigin, executors: Executors
) -> None:
    print()
    for line in source_lines(sources):
        print(line)
    if note := cpu_note(e.plan, executors):  # under the flag's own line, before the findings
        print(f"\nnote: {note}")
    from exedra_engine.cli.launch.launch_output import auth_note

    if note := auth_note(e.plan, executors):
        print(f"\nnote: the executor is {note}")
    if e.memory:
        print("\nmemory (what the executor is expected to use, and what the planner decided):")
        for line in e.memory:
            print(f"  {shown(line)}")
    print(f"\nfindings, judged by {shown(origin.describe())}:")
    for f in e.findings:
        print(f"  {finding_line(f)}")
    if not e.findings:
        print("  none")


def cpu_note(plan: LaunchPlan, executors: Executors = BUILTIN) -> str:
    """Why a plan pins the model to the CPU, and that the executor's start-up warning about
    it is expected (llama-server prints "no usable GPU found ... consult docs/build.md" for
    ``--n-gpu-layers 0`` on a host or build without a GPU, and nothing without the flag: a
    newcomer reads it as a broken build). "" when the plan does not pin it."""
    p = executors.profile(plan.spec.kind)
    n = len(p.cpu_only_args)
    if not n or not any(plan.args[i : i + n] == p.cpu_only_args for i in range(len(plan.args))):
        return ""
    flags = " ".join(p.cpu_only_args)
    return (
        f"{flags} keeps the model on the CPU (no GPU here that it can use, or --no-gpu): the "
        "warning of the executor about no usable GPU is expected"
    )


def findings_verdict(a: argparse.Namespace, e: Explained) -> int:
    """Exit 0; with ``--strict``, 2 when the plan has findings other than notes. Without
    ``--explain`` the
    findings are summed up on stderr, where a plan's JSON on stdout is not disturbed."""
    if not e.findings:
        return 0
    refused = failing(e.findings)
    if a.strict and refused:
        summary = findings_summary(refused)
        first = finding_line(refused[0])
        raise EngineError(f"--strict: the plan has findings ({summary}); first: {first}")
    if not a.explain:
        # What the model's header says is printed whole: no other table judges it.
        layers = [f for f in e.findings if f.code not in MODEL_CODES]
        for f in e.findings:
            if f.code in MODEL_CODES:
                print(f"{PROG}: {f.severity}: {shown(f.message)} [{f.code}]", file=sys.stderr)
        if layers:
            print(
                f"{PROG}: {findings_heading(layers)} in what this plan passes on, "
                "judged by the bundled flag table; plan --explain lists them, judged by the "
                "installed binary",
                file=sys.stderr,
            )
    return 0


def _plan_and_emit(a: argparse.Namespace) -> int:
    from exedra_engine.cli.emit import run_emit

    # A container target binds every address unless the caller says otherwise (--explain
    # says so): loopback inside a container is reached by nothing, not even the probes.
    host_defaulted = not a.host and a.emit != "systemd"
    if host_defaulted:
        a.host = "0.0.0.0"
    req = plan_request(a)
    e = explain_request(req)
    # The emitter is host-blind: the hardware the plan was made for is passed to it.
    return run_emit(e.plan, req.hardware, a, e.sources, host_defaulted=host_defaulted)
