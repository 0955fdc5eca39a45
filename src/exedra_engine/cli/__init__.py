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
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

import msgspec

from exedra_engine._core.check import TableOrigin, bundled_origin
from exedra_engine._core.config import merge_all
from exedra_engine._core.executors import executor_profile, profiles
from exedra_engine._core.kinds import Kind, supported_kinds
from exedra_engine._core.layers import Source
from exedra_engine._core.planner import Explained, layer_names
from exedra_engine._core.redact import (
    SHORT_KEY,
    TextRedactor,
    plan_secrets,
    redact_config,
    redact_source,
)
from exedra_engine._core.values import Constraints, ExecutorInfo, LaunchPlan, ModelSpec
from exedra_engine._shell.check import located_configs
from exedra_engine._shell.hardware_file import read_hardware
from exedra_engine._shell.inspect import read_model
from exedra_engine._shell.load_config import read_config
from exedra_engine._shell.plan import PlanRequest, explain_request
from exedra_engine._shell.probe import host_hardware
from exedra_engine._version import __version__
from exedra_engine.cli import options
from exedra_engine.cli.emit import add_emit_options
from exedra_engine.cli.render import (
    PROG,
    fail,
    finding_line,
    findings_summary,
    hide_values,
    print_json,
    print_plan,
    shown,
    shown_plan,
    size_text,
)
from exedra_engine.constants import DEFAULT_CONFIG_PATH, DEFAULT_PORT_BASE, STOP_TIMEOUT
from exedra_engine.errors import EngineError, LaunchError, NotReady


def _columns() -> int:
    """`shutil.get_terminal_size().columns`, without importing shutil (2 ms of a cold start,
    with its zlib, bz2 and lzma): $COLUMNS, else the terminal on stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns if columns > 0 else 80


class _Formatter(argparse.HelpFormatter):
    # argparse makes one of these for every add_argument; its own sizes itself with shutil.
    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        width = _columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)


class _Parser(argparse.ArgumentParser):
    """argparse with three safety rules for a tool that is handed keys.

    - No abbreviations: ``--api-key K`` (llama-server's own flag, what a user types) must not
      be read as ``--api-key-env K`` and the key echoed as a variable's name; ``--ct`` is not
      ``--ctx``.
    - No value is echoed in a parse error: an option given the wrong kind of value is named,
      the value is not (it may be a key typed in the wrong place). Unknown options are named
      with a did-you-mean; the values that follow them are counted, not shown.
    - An executor's key flag (``--api-key``, ``--hf-token``) given to the CLI gets its own
      answer: keys travel in variables (``--api-key-env VAR``), never in argv.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        ns, extras = super().parse_known_args(args, namespace)
        # A subcommand judges its own leftovers, so a did-you-mean draws on its options.
        if extras and self._subparsers is None:
            self.error(unknown_arguments(extras, self._option_string_actions))
        return ns, extras

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        try:
            return super()._get_value(action, arg_string)
        except argparse.ArgumentError:
            if getattr(action.type, "__module__", "") == options.__name__:
                raise  # its message quotes the value only when it is no key (cli/options.py)
            kind = getattr(action.type, "__name__", "")
            what = getattr(action.type, "expected", "") or {
                "int": "an integer",
                "float": "a number",
            }.get(kind, "a valid value")
            raise argparse.ArgumentError(
                action, f"expected {what} (the value given is not shown)"
            ) from None

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is not None and value not in action.choices:
            choices = [str(c) for c in action.choices]
            hint = did_you_mean(str(value), choices)
            raise argparse.ArgumentError(
                action, f"choose from {', '.join(choices)}{hint} (the value given is not shown)"
            )

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # CPython 3.11's argparse strips an explicit "--" value (``--arg=--``) and hands the
        # action an empty list where a string belongs: a traceback further on. The value is
        # the string "--", as later Pythons read it.
        given = list(arg_strings)
        value = super()._get_values(action, arg_strings)
        if action.option_strings and action.nargs is None and given == ["--"] and value == []:
            value = self._get_value(action, "--")
            self._check_value(action, value)
        return value

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse swallows a failed write (--help into a closed pipe or /dev/full would exit
        # 0 having printed nothing); main() reports it like any other failed write.
        if message:
            (file or sys.stderr).write(message)

    def error(self, message: str) -> NoReturn:
        # argparse quotes the offending argument as given; one line whatever it contains.
        self.exit(2, f"{self.prog}: error: {shown(message)}\n")


def did_you_mean(given: str, known: Sequence[str]) -> str:
    """``; did you mean --ctx?`` when one known name is close to `given`, else ""."""
    import difflib

    close = difflib.get_close_matches(given, known, n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


def unknown_arguments(extras: Sequence[str], options: Mapping[str, object]) -> str:
    """The parse error for arguments no option took: the options are named (with a
    did-you-mean), the values are only counted, since a value may be a key."""
    from exedra_engine._core.executors import is_secret_flag

    names = [t.partition("=")[0] for t in extras if t.startswith("-") and len(t) > 1]
    values = len(extras) - len(names)
    keys = [n for n in names if is_secret_flag(n)]
    if keys:
        return (
            f"{keys[0]}: keys are not taken on the command line (argv shows in ps and shell "
            "history); put the key in a variable and pass --api-key-env VAR"
        )
    parts = []
    for n in names:
        parts.append(f"unrecognized option {n}{did_you_mean(n, sorted(options))}")
    if values:
        parts.append(f"{values} unexpected value{'s' if values > 1 else ''} (not shown)")
    return "; ".join(parts)


# -- probe, inspect, config -------------------------------------------------------------


def cmd_probe(a: argparse.Namespace) -> int:
    hw = host_hardware()
    if a.measure:
        from exedra_engine.cli.measure import measured_host

        hw = measured_host(hw, a.measure, a.ctx, a.arg)
    elif a.ctx or a.arg:
        raise EngineError("--ctx and --arg go with --measure MODEL")
    if a.json:
        print_json(hw)
        return 0
    print(
        f"cpu        {hw.cpu.threads} threads, {size_text(hw.cpu.ram)} RAM, "
        f"{_free_text(hw.cpu.available)} free"
    )
    if not hw.gpus:
        print("gpus       none (CPU-only host)")
    for g in hw.gpus:
        driver = shown(g.driver or "unknown")
        print(
            f"gpu        {shown(g.card)}  driver {driver}  VRAM {size_text(g.vram)}, "
            f"{_free_text(g.vram_free)} free"
        )
    from exedra_engine._shell.executor_cache import cache_bin_dirs, where
    from exedra_engine._shell.flag_tables import version_problem
    from exedra_engine.constants import INSTALL_HINT

    for k in supported_kinds():
        e = hw.executor(k)
        if e:
            problem = "" if e.version else version_problem(e.path)
            version = e.version or ("not stated" + (f" ({problem})" if problem else ""))
            what = (
                f"{shown(e.path)}  backends: {shown(', '.join(e.backends) or 'built in')}"
                + f"  version: {shown(version)}"
            )
            found_in = os.path.dirname(e.path)
            if found_in in cache_bin_dirs() and found_in not in _path_dirs():
                what += f"  (not on PATH: found in {shown(where(found_in))})"
        else:
            what = f"not installed: {INSTALL_HINT}"
        print(f"{k.value:<10} {what}")
    if hw.measurements:
        from exedra_engine.cli.measure import measurement_lines

        print("\n".join(measurement_lines(hw.measurements)))
    return 0


def _free_text(free: int | None) -> str:
    # None is "the host does not say" (nvidia sysfs, an old probe's file): never shown as 0.
    return "unknown" if free is None else size_text(free) if free > 0 else "0 B"


def _path_dirs() -> list[str]:
    return os.environ.get("PATH", os.defpath).split(os.pathsep)


def cmd_inspect(a: argparse.Namespace) -> int:
    m = read_model(a.path)
    if a.json:
        print_json(m)
        return 0
    print(f"path          {shown(m.path)} ({size_text(m.size)})")
    print(f"architecture  {shown(m.architecture)}")
    print(f"name          {shown(m.name or '-')}")
    print(f"quant         {shown(m.quant or '-')}")
    print(f"blocks        {m.blocks}")
    print(f"context       {m.context}")
    return 0


def cmd_config(a: argparse.Namespace) -> int:
    if a.schema:
        from exedra_engine.cli.check import print_schema

        return print_schema()
    if a.check:
        from exedra_engine.cli.check import run_check

        return run_check(a)
    if a.executor or a.strict:
        raise EngineError("--executor and --strict go with --check")
    cfg = read_config(a.path)
    if not a.show_secrets:
        cfg = redact_config(cfg)
    if a.json:
        print_json(cfg)
        return 0
    import yaml

    text = yaml.safe_dump(msgspec.to_builtins(cfg), sort_keys=False, default_flow_style=False)
    print(f"# merged from {shown(os.fsdecode(a.path or DEFAULT_CONFIG_PATH))}")
    print(text.strip() if text.strip() != "{}" else "# (empty)")
    return 0


# -- plan ---------------------------------------------------------------------------------


def _add_plan_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument("--model", required=True, metavar="PATH", help="model weights")
    g.add_argument(
        "--kind",
        required=True,
        choices=[k.value for k in supported_kinds()],
        help="executor family",
    )
    g.add_argument("--id", default="", help="served model id; also selects config models.ID")
    g.add_argument(
        "--capability",
        action="append",
        default=[],
        metavar="CAP",
        choices=sorted({c for p in profiles() for c in p.capabilities}),
        help="%(choices)s (repeatable; which ones a kind serves is checked when planning)",
    )
    g.add_argument(
        "--run-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="model-recommended flag, the lowest layer (repeatable)",
    )
    g = p.add_argument_group("constraints")
    g.add_argument(
        "--config",
        type=options.config_path,
        metavar="PATH",
        help=f"override file or directory (default {DEFAULT_CONFIG_PATH})",
    )
    g.add_argument("--no-config", action="store_true", help="ignore admin overrides")
    g.add_argument("--host", default="", help="bind address (default 127.0.0.1)")
    g.add_argument(
        "--port", type=options.PORT, default=0, help="exact port; 0 scans for a free one"
    )
    g.add_argument(
        "--port-base",
        type=options.PORT_BASE,
        default=0,
        help=f"first port of the scan (default {DEFAULT_PORT_BASE})",
    )
    g.add_argument(
        "--ctx",
        type=options.count(zero="executor default"),
        default=0,
        help="context size (0: executor default)",
    )
    g.add_argument(
        "--threads",
        type=options.count(zero="executor default"),
        default=0,
        help="CPU threads (0: executor default)",
    )
    g.add_argument("--no-gpu", action="store_true", help="run on the CPU even with a GPU")
    g.add_argument("--ui", action="store_true", help="keep the executor's web UI")
    g.add_argument(
        "--api-key-env", metavar="VAR", help="read the API key from this environment variable"
    )
    g.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="ARG",
        help="caller flag, the top layer (repeatable; use --arg=--flag)",
    )
    g.add_argument(
        "--env",
        action="append",
        type=options.env_item,
        default=[],
        metavar="K=V",
        help="caller environment, the top layer (repeatable)",
    )
    g.add_argument(
        "--hardware",
        metavar="FILE",
        help="plan for the host this file describes (from `probe --json` there): its GPUs, "
        "threads, executors and backends, instead of this machine's",
    )
    g.add_argument(
        "--executor",
        type=options.executor_path,
        metavar="PATH",
        help="executor binary to plan with instead of the one on PATH",
    )
    g.add_argument(
        "--no-port-check",
        action="store_true",
        help="plan as if every port were free (a dry run for another machine)",
    )
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true", help="print JSON")
    g.add_argument("--show-secrets", action="store_true", help="print API keys unredacted")


def _request(a: argparse.Namespace) -> PlanRequest:
    """What the planner is asked, from the command line; with ``--measure``, its hardware
    holds the engine's own measurement of the plan asked for. Raises the `EngineError` of a
    file that cannot be read or an option that cannot be honoured."""
    req = _gathered(a)
    return _measured(a, req) if a.measure else req


def _gathered(a: argparse.Namespace) -> PlanRequest:
    from exedra_engine.errors import PlanError

    spec = ModelSpec(
        id=a.id,
        path=a.model,
        kind=Kind(a.kind),
        capabilities=tuple(a.capability),
        run_args=tuple(a.run_arg),
    )
    hw = read_hardware(a.hardware) if a.hardware else host_hardware()
    if a.executor:
        others = tuple(e for e in hw.executors if e.kind != spec.kind)
        hw = msgspec.structs.replace(
            hw, executors=(*others, ExecutorInfo(kind=spec.kind, path=a.executor))
        )
    files = () if a.no_config else located_configs(a.config)
    key = ""
    if a.api_key_env:
        key = os.environ.get(a.api_key_env, "")
        if not key:
            raise PlanError(api_key_env_problem(a.api_key_env))
    constraints = Constraints(
        host=a.host,
        ctx=a.ctx,
        threads=a.threads,
        port=a.port,
        port_base=a.port_base,
        api_key=key,
        api_key_env=a.api_key_env or "",
        no_gpu=a.no_gpu,
        ui=a.ui,
        overrides=None if a.no_config else merge_all([f.config for f in files]),
        extra_args=tuple(a.arg),
        extra_env=tuple(a.env),
    )
    return PlanRequest(
        spec=spec,
        hardware=hw,
        constraints=constraints,
        config_files=files,
        check_ports=not a.no_port_check,
    )


def _measured(a: argparse.Namespace, req: PlanRequest) -> PlanRequest:
    """`req` with the engine's own measurement of the plan asked for in its hardware: planned
    once for its flags, measured on this machine."""
    from exedra_engine.cli.measure import with_measurement
    from exedra_engine.errors import PlanError

    if a.hardware or req.hardware is None:
        raise PlanError(
            "--measure measures on this machine, --hardware plans for another: measure "
            "there (probe --json --measure MODEL) and plan from that file"
        )
    first = explain_request(msgspec.structs.replace(req, check_ports=False))
    hw = with_measurement(req.hardware, first.plan)
    return msgspec.structs.replace(req, hardware=hw)


_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def api_key_env_problem(name: str) -> str:
    """Why ``--api-key-env NAME`` gave no key. The name is shown only in the form variables
    are conventionally named (upper case, digits, underscores): anything else may be the key
    itself, typed where its variable's name belongs."""
    if not _ENV_NAME.fullmatch(name):
        return (
            "--api-key-env takes the name of a variable holding the key, and the value given "
            "is not a variable name (not shown: it may be the key itself); "
            "export MY_KEY=... and pass --api-key-env MY_KEY"
        )
    state = "empty" if name in os.environ else "not set"
    return (
        f"--api-key-env: variable {name} is {state}; "
        "plan without --api-key-env for an unauthenticated executor"
    )


def _planned(a: argparse.Namespace) -> tuple[PlanRequest, Explained, TableOrigin]:
    """The request, its plan explained, and the table its layers were judged by: with
    ``--explain`` or ``--strict`` the executor's own (its ``--help``, cached), else the
    bundled one."""
    req = _request(a)
    kind = req.spec.kind
    exe = req.hardware.executor(kind) if req.hardware else None
    flags, origin = None, bundled_origin(kind)
    if exe is not None and (a.explain or a.strict):
        from exedra_engine._shell.flag_tables import executor_table

        flags, origin = executor_table(executor_profile(kind), exe.path)
    return req, explain_request(req, flags=flags), origin


def cmd_plan(a: argparse.Namespace) -> int:
    if getattr(a, "emit", None):
        if a.json:
            # Ignored before: emit writes files and prints text, so a script reading JSON
            # from `plan --emit ... --json` got "wrote ..." instead.
            raise EngineError(
                "--json does not go with --emit: the emitted files are the output "
                "(plan ... --json > plan.json saves the plan; emit PLAN.json renders it)"
            )
        return _plan_and_emit(a)
    # An emit option without --emit would be ignored: refused, as config --strict without
    # --check is, so that `plan --out DIR` does not look as if it wrote something.
    given = [opt for dest, opt, default in a.emit_only if getattr(a, dest) != default]
    if given:
        raise EngineError(
            f"{', '.join(given)} go{'es' * (len(given) == 1)} with --emit "
            "(plan ... --emit k8s|systemd|quadlet); without it nothing is emitted"
        )
    _, e, origin = _planned(a)
    e = _shown_findings(e, a.show_secrets)
    if a.strict and e.findings and not a.explain:
        return _findings_verdict(a, e)
    plan = shown_plan(e.plan, a.show_secrets, e.sources)
    sources = _shown_sources(e, a.show_secrets)
    if a.json:
        if a.explain:
            print_json(
                {
                    "plan": plan,
                    "sources": sources,
                    "findings": e.findings,
                    "flag_table": origin,
                    "memory": e.memory,
                }
            )
        else:
            print_json(plan)
    else:
        print_plan(plan)
    if a.explain and not a.json:
        _print_explain(sources, e, origin)
    return _findings_verdict(a, e)


def _shown_sources(e: Explained, show_secrets: bool) -> list[Source]:
    if show_secrets:
        return list(e.sources)
    names = layer_names(e.plan.spec)
    secrets = plan_secrets(e.plan.args, e.plan.env)
    return [redact_source(s, secrets, names) for s in e.sources]


def _shown_findings(e: Explained, show_secrets: bool) -> Explained:
    """`e` with every long key (`SHORT_KEY` characters or more) hidden in its findings,
    which quote the tokens they judge as free text: a caller's ``--arg=--temp=KEY`` is
    worded back. A shorter key stands where the checker says, redacted there."""
    if show_secrets or not e.findings:
        return e
    hide = TextRedactor(k for k in plan_secrets(e.plan.args, e.plan.env) if len(k) >= SHORT_KEY)
    findings = tuple(
        msgspec.structs.replace(
            f,
            token=hide.text(f.token),
            message=hide.text(f.message),
            suggestion=hide.text(f.suggestion),
        )
        for f in e.findings
    )
    return msgspec.structs.replace(e, findings=findings)


def _print_explain(sources: list[Source], e: Explained, origin: TableOrigin) -> None:
    print(
        "\nwhere each part came from (lowest layer first: run_args, engine, config env, "
        "config engines, config models, caller):"
    )
    for s in sources:
        print(f"  {s.what:<3}  {shown(s.text):<40}  {shown(s.layer)}")
        for o in s.overrode:
            print(f"  {'':<3}  {'':<40}    overrode {shown(o)}")
    if note := _cpu_note(e.plan):  # under the flag's own line, before the findings
        print(f"\nnote: {note}")
    if e.memory:
        print("\nmemory (what the executor is expected to use, and what the planner decided):")
        for line in e.memory:
            print(f"  {shown(line)}")
    print(f"\nfindings, judged by {shown(origin.describe())}:")
    for f in e.findings:
        print(f"  {finding_line(f)}")
    if not e.findings:
        print("  none")


def _cpu_note(plan: LaunchPlan) -> str:
    """Why a plan pins the model to the CPU, and that the executor's start-up warning about
    it is expected (llama-server prints "no usable GPU found ... consult docs/build.md" for
    ``--n-gpu-layers 0`` on a host or build without a GPU, and nothing without the flag: a
    newcomer reads it as a broken build). "" when the plan does not pin it."""
    p = executor_profile(plan.spec.kind)
    n = len(p.cpu_only_args)
    if not n or not any(plan.args[i : i + n] == p.cpu_only_args for i in range(len(plan.args))):
        return ""
    flags = " ".join(p.cpu_only_args)
    return (
        f"{flags} keeps the model on the CPU: this host has no GPU that this {p.binary} "
        "can use, or --no-gpu asked for it. A start-up warning of the executor about no "
        "usable GPU is expected then, not a broken build"
    )


def _findings_verdict(a: argparse.Namespace, e: Explained) -> int:
    """Exit 0; with ``--strict``, 2 when the plan has findings. Without ``--explain`` the
    findings are summed up on stderr, where a plan's JSON on stdout is not disturbed."""
    if not e.findings:
        return 0
    summary = findings_summary(e.findings)
    if a.strict:
        first = finding_line(e.findings[0])
        raise EngineError(f"--strict: the plan has findings ({summary}); first: {first}")
    if not a.explain:
        print(
            f"{PROG}: warning: {summary} in what this plan passes on, judged by the bundled "
            "flag table; plan --explain lists them, judged by the installed binary",
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
    req = _request(a)
    e = explain_request(req)
    # The emitter is host-blind: the hardware the plan was made for is passed to it.
    return run_emit(e.plan, req.hardware, a, e.sources, host_defaulted=host_defaulted)


def cmd_emit(a: argparse.Namespace) -> int:
    from exedra_engine.cli.emit import load_plan, run_emit

    hw = read_hardware(a.hardware) if a.hardware else None
    return run_emit(load_plan(a.plan), hw, a)


def cmd_wait_ready(a: argparse.Namespace) -> int:
    from exedra_engine.cli.emit import cmd_wait_ready as run

    return run(a)


def cmd_launch(a: argparse.Namespace) -> int:
    from exedra_engine.cli.signals import Interrupted, Signals, interrupted_exit

    # `plan` allows an absent model (planning for another machine); a launch cannot succeed
    # without one, and is refused before anything is started.
    if not os.path.isfile(a.model):
        why = "is a directory" if os.path.isdir(a.model) else "does not exist"
        raise EngineError(f"--model {a.model}: {why}; launch needs the model file on this host")
    # Signals are honoured from here on, planning included (see cli/launch.py).
    with Signals().installed() as sigs:
        try:
            from exedra_engine.cli.launch import run_launch

            _, e, _ = _planned(a)
            _findings_verdict(a, _shown_findings(e, a.show_secrets))
        except Interrupted as i:
            return interrupted_exit(i.signum, "planning", "nothing was started")
        if not (a.quiet or a.log_file) and (note := _cpu_note(e.plan)):
            print(f"{PROG}: note: {note}", file=sys.stderr)  # before the executor's logs
        return run_launch(e.plan, a, sigs, e.sources)


def cmd_completion(a: argparse.Namespace) -> int:
    import shtab

    parser = build_parser()
    _mark_paths(parser)
    sys.stdout.write(shtab.complete(parser, shell=a.shell))
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


def cmd_demo(a: argparse.Namespace) -> int:
    from exedra_engine.cli.signals import Interrupted, Signals, interrupted_exit

    with Signals().installed() as sigs:
        try:
            from exedra_engine.cli.demo import run_demo
        except Interrupted as i:
            return interrupted_exit(i.signum, "planning", "nothing was started")
        return run_demo(a, sigs)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Plan and launch local AI model executors "
        f"({', '.join(p.binary for p in profiles())}).",
        epilog="Exit status: 0 ok, 1 run-time failure, 2 bad input.",
    )
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    s = sub.add_parser("probe", help="show CPU, RAM, GPUs and installed executors")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument(
        "--measure",
        nargs="+",
        default=[],
        metavar="MODEL",
        help=f"also measure what {executor_profile(Kind.LLAMA).binary} would reserve for each "
        f"model ({executor_profile(Kind.LLAMA).measure_binary}), with the plan this host makes "
        "for it; plan --hardware uses these figures",
    )
    s.add_argument(
        "--ctx",
        type=int,
        action="append",
        default=[],
        metavar="N",
        help="with --measure: measure at this context (repeatable; default: the model's own)",
    )
    s.add_argument(
        "--arg",
        action="append",
        default=[],
        metavar="ARG",
        help="with --measure: a flag of the plans measured (repeatable; use --arg=--flag)",
    )
    s.set_defaults(func=cmd_probe)

    s = sub.add_parser("inspect", help="read a GGUF model's metadata from its header")
    s.add_argument("path", help="GGUF file")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_inspect)

    s = sub.add_parser(
        "config",
        help="print the merged admin overrides; --check judges them by the executors' flags, "
        "--schema prints their JSON Schema",
    )
    s.add_argument(
        "path",
        nargs="?",
        default=None,
        type=options.config_path,
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
    s.set_defaults(func=cmd_config)

    s = sub.add_parser("plan", help="plan a launch and print it; starts nothing (dry run)")
    _add_plan_options(s)
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
    s.set_defaults(
        func=cmd_plan,
        emit_only=tuple(
            (x.dest, x.option_strings[0], x.default)
            for x in emit_group._group_actions
            if x.dest != "emit"
        ),
    )

    s = sub.add_parser(
        "emit", help="render a saved plan (plan --json) for Kubernetes, systemd or Quadlet"
    )
    s.add_argument("plan", metavar="PLAN.json", help="a plan saved with plan --json")
    s.add_argument(
        "--hardware",
        metavar="FILE",
        help="the hardware file the plan was made for (names the GPU resource)",
    )
    s.add_argument("--explain", action="store_true", help="say where each field came from")
    add_emit_options(s, target_flag="--target")
    s.set_defaults(func=cmd_emit)

    s = sub.add_parser("wait-ready", help="wait until a URL answers 200 (a unit's readiness)")
    s.add_argument("url", help="the executor's ready URL, e.g. http://127.0.0.1:8080/health")
    s.add_argument(
        "--timeout", type=options.seconds, default=300.0, metavar="S", help="default 300"
    )
    s.add_argument("--interval", type=options.seconds, default=1.0, metavar="S", help="default 1")
    s.set_defaults(func=cmd_wait_ready)

    _add_launch(sub)

    s = sub.add_parser(
        "demo",
        help=f"generate a tiny model, launch a real {executor_profile(Kind.LLAMA).binary} on it, "
        "ask it one question, stop it",
    )
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--question", default="Say hello.", help="what to ask")
    s.set_defaults(func=cmd_demo)
    _add_completion(sub)
    return p


def _add_launch(sub: Any) -> None:
    s = sub.add_parser("launch", help="plan, launch, wait until ready; Ctrl-C stops it")
    _add_plan_options(s)
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
    s.add_argument(
        "--quiet",
        action="store_true",
        help="do not forward the executor's logs (its last lines still explain a failure)",
    )
    s.add_argument(
        "--log-file",
        type=options.log_file,
        metavar="FILE",
        help="append the executor's logs to FILE instead of stderr (keys redacted)",
    )
    s.set_defaults(func=cmd_launch, explain=False, strict=False, measure=False)


def _add_completion(sub: Any) -> None:
    s = sub.add_parser(
        "completion",
        help="print a shell completion script (bash: source it, or save it as "
        "~/.local/share/bash-completion/completions/exedra-engine; zsh: save it as "
        "_exedra-engine in a directory of $fpath)",
    )
    s.add_argument("shell", choices=["bash", "zsh"], help="the shell")
    s.set_defaults(func=cmd_completion)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``exedra-engine`` script."""
    try:
        try:
            with _untranslated():
                parser = build_parser()
            if not (sys.argv[1:] if argv is None else argv):
                # A bare call: the usage and the commands, not only "COMMAND is required".
                parser.print_help(sys.stderr)
                raise SystemExit(2)
            args = parser.parse_args(argv)
        except SystemExit as e:  # --help, --version, a usage error: argparse printed it
            sys.stdout.flush()  # here, so a failed write is handled like any other
            return e.code if isinstance(e.code, int) else 2 if e.code else 0
        hide_values(_given_values(parser, args))
        from exedra_engine._shell import notice

        notice.hook = _note
        code: int = args.func(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        return 130
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


def exit_status(e: EngineError) -> int:
    return next(code for cls, code in EXIT_STATUS if isinstance(e, cls))


@contextlib.contextmanager
def _untranslated() -> Iterator[None]:
    """argparse asks gettext for every heading and help line it makes while the parser is
    built: some 30 catalogue searches, each normalising the locale, ~4 ms of a 100 ms cold
    start. No catalogue translates argparse's strings (CPython ships none), so building the
    parser uses them as written; errors at parse time are still looked up."""
    lookup = argparse._  # type: ignore[attr-defined]
    argparse._ = str  # type: ignore[attr-defined]
    try:
        yield
    finally:
        argparse._ = lookup  # type: ignore[attr-defined]


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
