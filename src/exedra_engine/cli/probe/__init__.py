"""``exedra-engine probe``: the host's CPU, RAM, GPUs and installed executors; with
``--measure``, what the executor would reserve for each model given."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

import msgspec

from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.values import ExecutorInfo, Hardware
from exedra_engine._shell.probe import host_hardware
from exedra_engine.cli.parser import Subparsers
from exedra_engine.cli.render import Report, shown, size_or_unknown
from exedra_engine.errors import EngineError


def add_parser(sub: Subparsers) -> None:
    s = sub.add_parser("probe", help="show CPU, RAM, GPUs and installed executors")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument(
        "--measure",
        nargs="+",
        default=[],
        metavar="MODEL",
        help=f"also measure what {LLAMA.binary} would reserve for each "
        f"model ({LLAMA.measure_binary}), with the plan this host makes "
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
    s.add_argument(
        "--flags",
        action="store_true",
        help="also record each executor's flags (its --help, parsed), so that plan --hardware "
        "FILE --explain elsewhere judges by this host's binary without running anything",
    )
    s.set_defaults(func=probe_command)


def probe_command(a: argparse.Namespace) -> Report:
    hw = host_hardware(executors=a.executors)
    if a.measure:
        from exedra_engine.cli.probe.measure import measured_host

        hw = measured_host(hw, a.measure, a.ctx, a.arg)
    elif a.ctx or a.arg:
        raise EngineError("--ctx and --arg go with --measure MODEL")
    if a.flags:
        hw = _with_flags(hw, a.executors)
    return Report(hw, _lines(hw, a.executors))


def _with_flags(hw: Hardware, executors: Executors) -> Hardware:
    from exedra_engine._shell.local.flag_tables import executor_rows

    recorded = tuple(
        msgspec.structs.replace(e, flags=executor_rows(executors.profile(e.kind), e.path))
        for e in hw.executors
    )
    return msgspec.structs.replace(hw, executors=recorded)


def _lines(hw: Hardware, executors: Executors) -> Iterator[str]:
    yield (
        f"cpu        {hw.cpu.threads} threads, {size_or_unknown(hw.cpu.ram)} RAM, "
        f"{_free_text(hw.cpu.available)} free"
    )
    if not hw.gpus:
        yield "gpus       none (CPU-only host)"
    for g in hw.gpus:
        driver = shown(g.driver or "unknown")
        yield (
            f"gpu        {shown(g.card)}  driver {driver}  VRAM {size_or_unknown(g.vram)}, "
            f"{_free_text(g.vram_free)} free"
        )
    for k in executors.kinds:
        e = hw.executor(k)
        yield f"{k:<10} {_executor_text(e)}"
        if e:
            yield from _device_lines(hw, e, executors.profile(k))
    if hw.measurements:
        from exedra_engine.cli.probe.measure import measurement_lines

        yield "\n".join(measurement_lines(hw.measurements))


def _executor_text(e: ExecutorInfo | None) -> str:
    """One executor's line: its path, backends, version (and where a cached one was found)."""
    # Asked only for the text: the binaries' versions, and where a cached one was found.
    from exedra_engine._shell.local.executor_cache import build_source, cache_bin_dirs, where
    from exedra_engine._shell.local.flag_tables import version_problem
    from exedra_engine.constants import INSTALL_HINT

    if not e:
        return f"not installed: {INSTALL_HINT}"
    problem = "" if e.version else version_problem(e.path)
    version = e.version or ("not stated" + (f" ({problem})" if problem else ""))
    if source := build_source(e.path):
        version += f"; built from {source}"
    what = (
        f"{shown(e.path)}  backends: {shown(', '.join(e.backends) or 'built in')}"
        + f"  version: {shown(version)}"
    )
    if e.flags:
        what += f"  flags: {len(e.flags)} recorded"
    found_in = os.path.dirname(e.path)
    if found_in in cache_bin_dirs() and found_in not in _path_dirs():
        what += f"  (not on PATH: found in {shown(where(found_in))})"
    return what


def _device_lines(hw: Hardware, e: ExecutorInfo, profile: ExecutorProfile) -> Iterator[str]:
    """The devices the binary lists, and where its view and the kernel's disagree."""
    from exedra_engine._core.host.device_views import disagreements
    from exedra_engine._shell.local.device_list import devices_problem

    if not profile.list_devices_flag:
        return
    if not e.listed():
        problem = devices_problem(profile, e.path)
        yield f"{'':<10} devices: not listed ({shown(problem or 'not asked')})"
        return
    under = ", ".join(f"{k}={v}" for k, v in e.devices_env)
    if under:
        yield f"{'':<10} devices as listed under {shown(under)}"
    if not e.devices:
        yield f"{'':<10} devices: none ({profile.binary} {profile.list_devices_flag})"
    for d in e.devices:
        yield (
            f"{'':<10} device {shown(d.name)}  {shown(d.description)}  "
            f"memory {size_or_unknown(d.total)}, {_free_text(d.free)} free"
        )
    for said in disagreements(hw, e.kind, profile.binary):
        yield f"{'':<10} note: {shown(said)}"


def _free_text(free: int | None) -> str:
    # None is "the host does not say" (nvidia sysfs, an old probe's file): never shown as 0.
    return "unknown" if free is None else size_or_unknown(free) if free > 0 else "0 B"


def _path_dirs() -> list[str]:
    return os.environ.get("PATH", os.defpath).split(os.pathsep)
