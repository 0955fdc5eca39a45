"""`weight_buffers`: one short real load of a plan's model by its own binary, to read which
buffers the build puts its weights in (`exedra_engine._core.memory.extra_buffers`), cached per
binary, model and placement; `plan_weight_buffers` is what a plan on this host hands the
planner (the figures, or why there are none).

The load runs the plan's own argv with ``--no-warmup`` and debug verbosity, on port 0, bounded
as every question put to a binary is (`exedra_engine._shell.local.bounded_run`: its own session,
marked, its whole tree killed and reaped); it ends as soon as the weights are placed (the first
``llama_context`` line after them), at the latest after `LOAD_TIMEOUT`. Only lines that name a
weight buffer are kept. A few seconds for a small model, once: the answer is kept in
``~/.cache/exedra-engine/weight-buffers`` under a key of the binary's and the model's path, size
and modification time, and of the settings that decide where weights go (`placement`): the
context, port, threads or key of a plan do not, so another context reuses the answer.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.memory.extra_buffers import (
    WeightBuffers,
    buffers_from_log,
)
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._shell.local.bounded_run import ask_binary
from exedra_engine.errors import MeasureError

LOAD_TIMEOUT: Final = 120.0
"""Seconds the short load gets (a large model from a slow disk)."""
ANNOUNCE_AFTER: Final = 5.0
"""Seconds after which a load still running is announced (a large model: the plan waits)."""
_MAX_KEPT: Final = 256
_MAX_LOG: Final = 16 << 20
"""Bytes of log a load may print before its weights are placed (``--verbose``)."""
_CACHE_VERSION: Final = 2

NOT_MEASURED = (
    "weight copies of the build not measured: a dry run runs nothing, so the extra host "
    "copies a build makes (AMX, CPU_REPACK) are not counted and the estimate may be low for "
    "builds that repack"
)
"""The memory note of a plan made from a hardware file."""

_problems: dict[str, str] = {}
"""Why a load gave no figures in this process, by key: tried once per process."""


def buffers_cache_dir() -> Path:
    """Where the answers are kept, one JSON file each."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "exedra-engine" / "weight-buffers"


def _identity(path: str) -> str:
    st = os.stat(path)
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


def placement(
    args: Sequence[str], env: Mapping[str, str], profile: ExecutorProfile
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """The flags of `args` and the variables of `env` that decide where the weights go
    (the profile's `weight_flags`, `weight_switches`, `weight_env` and `device_env`: layers
    on devices, overridden tensors, repacking, mapping, the split, the devices seen).
    Without a layer count (`layers_flags`) the executor's fitter places the layers by the
    context, so the context counts too."""
    valued, bare = profile.weight_flags, profile.weight_switches
    kept: list[str] = []
    take = False
    for a in args:
        name = a.split("=", 1)[0]
        if take or name in bare or (name in valued and "=" in a):
            kept.append(a)
            take = False
        elif name in valued:
            kept.append(a)
            take = True
    names = {a.split("=", 1)[0] for a in kept}
    ctx_flag = profile.memory_flags.get("ctx", "")
    if ctx_flag and not names & profile.layers_flags and profile.layers_env not in env:
        kept += _valued(args, ctx_flag)
    chosen = sorted(
        (k, v) for k, v in env.items() if k in profile.weight_env or k in profile.device_env
    )
    return tuple(kept), tuple(chosen)


def _valued(args: Sequence[str], flag: str) -> list[str]:
    out: list[str] = []
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            out += [a, args[i + 1]]
        elif a.startswith(f"{flag}="):
            out.append(a)
    return out


def _key(binary: str, model: str, args: Sequence[str], env: Sequence[tuple[str, str]]) -> str:
    text = json.dumps([_CACHE_VERSION, _identity(binary), _identity(model), list(args), env])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _full_env(env: Sequence[str]) -> dict[str, str]:
    full = dict(os.environ)
    for entry in env:
        name, sep, value = entry.partition("=")
        if sep:
            full[name] = value
    return full


def weight_buffers(
    binary: str,
    model: str,
    args: Sequence[str],
    env: Sequence[str] = (),
    *,
    timeout: float = LOAD_TIMEOUT,
    profile: ExecutorProfile,
) -> WeightBuffers:
    """Which buffers `binary` (the executor of `profile`) puts `model`'s weights in with the
    plan's `args` (its whole argv, the model flag included) and `env` (``NAME=VALUE``, on top
    of this process's, e.g. ``GGML_VK_VISIBLE_DEVICES``): from the cache, kept per the
    settings that place the weights (`placement`), else from one short load. Raises
    `MeasureError` when the load names no buffer (said again, unasked, for the rest of the
    process)."""
    for path, what in ((binary, "executor"), (model, "model")):
        if not os.path.isfile(path):
            raise MeasureError(f"{path}: the {what} of the load is not a file")
    full = _full_env(env)
    key = _key(binary, model, *placement(args, full, profile))
    if key in _problems:
        raise MeasureError(_problems[key])
    cached = buffers_cache_dir() / f"{key}.json"
    try:
        data = json.loads(cached.read_text())
        return WeightBuffers(
            buffers=tuple((str(n), int(b)) for n, b in data["buffers"]),
            source=str(data["source"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        wb = _loaded(binary, model, args, full, timeout)
    except MeasureError as e:
        _problems[key] = str(e)
        raise
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"buffers": [list(b) for b in wb.buffers], "source": wb.source}))
    tmp.replace(cached)
    return wb


def _loaded(
    binary: str, model: str, args: Sequence[str], env: Mapping[str, str], timeout: float
) -> WeightBuffers:
    argv = [binary, *_without_port(args), "--no-warmup", "--verbose", "--port", "0"]
    seen = _Placement()
    ran = ask_binary(
        argv, timeout=timeout, max_output=_MAX_LOG, env=env, slow=ANNOUNCE_AFTER, enough=seen.feed
    )
    found = buffers_from_log("\n".join(seen.kept))
    if not found:
        why = ran.problem or f"its last line: {seen.last or '(no output)'}"
        if ran.timed_out and not seen.placed:
            why = f"it did not place the weights within {timeout:g} s"
        raise MeasureError(f"{binary} loaded {Path(model).name} naming no weight buffer: {why}")
    return WeightBuffers(
        buffers=found,
        source=f"measured by a short load of {Path(model).name} by {binary}, cached",
    )


def _without_port(args: Sequence[str]) -> list[str]:
    # The load listens on port 0; the plan's port may be taken by then (or by the plan).
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
        elif a == "--port":
            skip = True
        elif not a.startswith("--port="):
            out.append(a)
    return out


class _Placement:
    """The model-buffer lines of a load's log, read until the weights are placed."""

    def __init__(self) -> None:
        self.kept: list[str] = []
        self.last = ""
        self.placed = False
        self._buf = b""

    def feed(self, chunk: bytes) -> bool:
        """Take `chunk` of the log; True once the weights are placed and the context begins."""
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        self._buf = self._buf[-4096:]
        for raw in lines:
            line = raw[:512].decode("utf-8", errors="replace")
            self.last = line or self.last
            if "model buffer size" in line and len(self.kept) < _MAX_KEPT:
                self.kept.append(line)
                self.placed = self.placed or not line.rstrip().endswith(" 0.00 MiB")
            elif self.placed and "llama_context:" in line:
                return True
        return False


def plan_weight_buffers(
    plan: LaunchPlan,
    profile: ExecutorProfile,
    *,
    timeout: float = LOAD_TIMEOUT,
    table: FlagTable | None = None,
) -> tuple[WeightBuffers | None, str]:
    """The build's weight buffers for a plan made on this host, from its own binary (cached),
    or None and why not ("" where there is nothing to measure: no memory plan, no model
    header read, an executor whose memory is not llama.cpp's). A binary whose help (its
    `table` where read already, else its ``--help``, cached) does not list ``--no-warmup``
    is not loaded: a stand-in or a wrapper would serve rather than load and stop."""
    if plan.memory is None or plan.model is None or not profile.memory_flags:
        return None, ""
    if not _lists_no_warmup(profile, plan.command, table):
        return None, (
            f"weight copies of this build not measured: {plan.command} does not list "
            "--no-warmup in its help, so no short load of it was made"
        )
    try:
        wb = weight_buffers(
            plan.command,
            plan.spec.path,
            plan.args,
            plan.env,
            timeout=timeout,
            profile=profile,
        )
    except (MeasureError, OSError) as e:
        return None, f"weight copies of this build not measured ({e}): the estimate may be low"
    return wb, ""


def _lists_no_warmup(profile: ExecutorProfile, path: str, table: FlagTable | None) -> bool:
    if table is not None and table is not profile.flags:
        return table.lookup("--no-warmup") is not None
    from exedra_engine._shell.local.flag_tables import executor_rows

    return any("--no-warmup" in (*row[0], *row[1]) for row in executor_rows(profile, path))
