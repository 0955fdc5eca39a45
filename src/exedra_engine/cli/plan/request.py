"""What the planner is asked, from the command line: the options `plan` and `launch` share
(the model, the constraints, the output), and the `PlanRequest` they make; with
``--measure``, the engine's own measurement of the plan asked for in its hardware."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

import msgspec

from exedra_engine._core.config.findings import TableOrigin, bundled_origin
from exedra_engine._core.config.parse import merge_all
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.plan.explained import Explained
from exedra_engine._core.values import Constraints, ExecutorInfo, ModelSpec
from exedra_engine._shell.config_check import located_configs
from exedra_engine._shell.plan import PlanRequest, explain_request
from exedra_engine._shell.probe import host_hardware
from exedra_engine.cli import options
from exedra_engine.cli.render import is_variable_name
from exedra_engine.constants import DEFAULT_CONFIG_PATH, DEFAULT_PORT_BASE

if TYPE_CHECKING:
    from collections.abc import Sequence

    from exedra_engine._core.config.parse import LocatedConfig


def add_plan_options(p: argparse.ArgumentParser, *, model_required: bool = True) -> None:
    """The options `plan` and `launch` share. Without `model_required`, ``--model`` and
    ``--kind`` are checked by the command (``--group FILE`` names the models instead)."""
    g = p.add_argument_group("model")
    g.add_argument("--model", required=model_required, metavar="PATH", help="model weights")
    g.add_argument(
        "--kind",
        required=model_required,
        choices=list(BUILTIN.kinds),
        help="executor family",
    )
    g.add_argument("--id", default="", help="served model id; also selects config models.ID")
    g.add_argument(
        "--capability",
        action="append",
        default=[],
        metavar="CAP",
        choices=sorted({c for p in BUILTIN for c in p.capabilities}),
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
        type=options.config_file,
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


def plan_request(a: argparse.Namespace) -> PlanRequest:
    """What the planner is asked, from the command line; with ``--measure``, its hardware
    holds the engine's own measurement of the plan asked for. Raises the `EngineError` of a
    file that cannot be read or an option that cannot be honoured."""
    req = _gathered(a)
    return _measured(a, req) if a.measure else req


def _refuse_other_kinds_binary(path: str, kind: str, executors: Executors) -> None:
    """``--kind llama --executor .../whisper-server``: the binary's name says it is another
    kind's executor, which would be handed flags it does not know."""
    from exedra_engine.errors import PlanError

    name = os.path.basename(path)
    for p in executors:
        if p.kind != kind and name == p.binary:
            raise PlanError(
                f"--executor: {name} is the executor of kind {p.kind}, not of kind "
                f"{kind} (plan it with --kind {p.kind}, or name a "
                f"{executors.profile(kind).binary})"
            )


def _gathered(a: argparse.Namespace) -> PlanRequest:

    ex: Executors = a.executors
    spec = ModelSpec(
        id=a.id,
        path=a.model,
        kind=ex.kind_of(a.kind),
        capabilities=tuple(a.capability),
        run_args=tuple(a.run_arg),
    )
    if a.hardware:
        # Imported here: the hardware-file reader is not paid by a plan of this host.
        from exedra_engine._shell.hardware_file import read_hardware

        hw = read_hardware(a.hardware, executors=ex)
    else:
        hw = host_hardware(executors=ex)
    if a.executor:
        _refuse_other_kinds_binary(a.executor, spec.kind, ex)
        others = tuple(e for e in hw.executors if e.kind != spec.kind)
        hw = msgspec.structs.replace(
            hw, executors=(*others, ExecutorInfo(kind=spec.kind, path=a.executor))
        )
    files = () if a.no_config else located_configs(a.config, executors=ex)
    constraints = msgspec.structs.replace(
        shared_constraints(a, files), ctx=a.ctx, threads=a.threads, port=a.port
    )
    return PlanRequest(
        spec=spec,
        hardware=hw,
        constraints=constraints,
        config_files=files,
        check_ports=not a.no_port_check,
        executors=ex,
    )


def shared_constraints(a: argparse.Namespace, files: Sequence[LocatedConfig]) -> Constraints:
    """What the command line's options say of every executor it plans, over the override
    `files`: a group's constraints (a single plan adds its context, threads and port)."""
    from exedra_engine.errors import PlanError

    key = ""
    if a.api_key_env:
        key = os.environ.get(a.api_key_env, "")
        if not key:
            raise PlanError(api_key_env_problem(a.api_key_env))
    return Constraints(
        host=a.host,
        port_base=a.port_base,
        api_key=key,
        api_key_env=a.api_key_env or "",
        no_gpu=a.no_gpu,
        ui=a.ui,
        overrides=None if a.no_config else merge_all([f.config for f in files]),
        extra_args=tuple(a.arg),
        extra_env=tuple(a.env),
    )


def _measured(a: argparse.Namespace, req: PlanRequest) -> PlanRequest:
    """`req` with the engine's own measurement of the plan asked for in its hardware: planned
    once for its flags, measured on this machine."""
    from exedra_engine.cli.probe.measure import measured_hardware
    from exedra_engine.errors import PlanError

    if a.hardware or req.hardware is None:
        raise PlanError(
            "--measure measures on this machine, --hardware plans for another: measure "
            "there (probe --json --measure MODEL) and plan from that file"
        )
    first = explain_request(msgspec.structs.replace(req, check_ports=False))
    hw = measured_hardware(req.hardware, first.plan)
    return msgspec.structs.replace(req, hardware=hw)


def api_key_env_problem(name: str) -> str:
    """Why ``--api-key-env NAME`` gave no key. The name is shown only in the form variables
    are conventionally named (upper case, digits, underscores): anything else may be the key
    itself, typed where its variable's name belongs."""
    if not is_variable_name(name):
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


def planned(
    a: argparse.Namespace, *, live: bool = False
) -> tuple[PlanRequest, Explained, TableOrigin]:
    """The request, its plan explained, and the table its layers were judged by: with
    ``--explain``, ``--strict`` or `live` (``launch``, which starts that binary) the
    executor's own (its ``--help``, cached), else the bundled one."""
    req = plan_request(a)
    kind = req.spec.kind
    exe = req.hardware.executor(kind) if req.hardware else None
    profile = req.executors.profile(kind)
    flags, origin = None, bundled_origin(profile)
    if exe is not None and (a.explain or a.strict or live):
        if a.hardware and not a.executor:
            flags, origin = recorded_table(profile, exe, a.hardware)
        else:
            from exedra_engine._shell.local.flag_tables import executor_table

            flags, origin = executor_table(profile, exe.path)
    e = explain_request(req, flags=flags, profile=profile)
    if req.hardware is not None and not a.hardware:
        # This host's plan: its executor's devices as it sees them under the plan's own
        # environment (a layer's CUDA_VISIBLE_DEVICES), planned again where they differ.
        from exedra_engine._shell.local.device_list import devices_for_plan

        hw = devices_for_plan(req.hardware, e.plan, executors=req.executors)
        if hw is not None:
            req = msgspec.structs.replace(req, hardware=hw)
            e = explain_request(req, flags=flags, profile=profile)
        req, e = _weighed(req, e, flags, profile)
    elif e.plan.memory is not None and profile.memory_flags:
        from exedra_engine._shell.extra_buffers import NOT_MEASURED

        e = msgspec.structs.replace(e, memory=(*e.memory, NOT_MEASURED))
    return req, e, origin


def _weighed(
    req: PlanRequest, e: Explained, flags: FlagTable | None, profile: ExecutorProfile
) -> tuple[PlanRequest, Explained]:
    """This host's plan with the weight copies its binary makes counted (one short load of
    the model, cached per binary, model and placement), added to the plan's memory, not
    planned again (`weighed`); the plan as it was, with a note saying why, when they could
    not be measured."""
    if e.plan.memory is None or e.plan.model is None or not profile.memory_flags:
        return req, e  # nothing to weigh (`plan_weight_buffers` says the same, costlier)
    from exedra_engine._shell.extra_buffers import plan_weight_buffers

    wb, why = plan_weight_buffers(e.plan, profile, table=flags)
    if wb is None:
        return req, (msgspec.structs.replace(e, memory=(*e.memory, why)) if why else e)
    from exedra_engine._core.plan.planner import weighed

    return msgspec.structs.replace(req, weight_buffers=wb), weighed(e, wb)


def recorded_table(
    profile: ExecutorProfile, exe: ExecutorInfo, hardware_file: str
) -> tuple[FlagTable | None, TableOrigin]:
    """The table a plan for another host is judged by: the flags its probe recorded, else the
    bundled table, saying why. The binary the file names is another machine's: a dry run
    never runs it (a file from elsewhere would choose what runs here)."""
    where = os.fsdecode(hardware_file)
    if exe.flags:
        from exedra_engine._core.executors.helptext import table_from_help_rows

        origin = TableOrigin(
            kind=profile.kind,
            binary=profile.binary,
            source="recorded",
            path=exe.path,
            version=exe.version,
            note=f"recorded in {where} by that host's probe",
        )
        return table_from_help_rows(profile, exe.flags), origin
    note = (
        f"{where} records no flags of {exe.path}, and a dry run runs nothing a hardware "
        "file names; probe --json --flags on that host records them"
    )
    return None, bundled_origin(profile, note)
