"""`measure`: ask the executor's own companion (``llama-fit-params --fit-print on``) what a
plan would reserve, and keep its answer as a `FitMeasurement`.

The companion loads the model without allocating anything and prints, per device and for the
host, the MiB it would reserve for weights, context and compute: the engine's own arithmetic,
which no estimate reproduces exactly. It is run with the plan's memory flags only (see
`exedra_engine._core.memory.fit_params.companion_args`), no shell, a clean ``LLAMA_ARG_*``
environment, a timeout that kills its whole process group, and bounded output. It is found
beside the plan's executor (both are built from the same source), else on PATH.

Synchronous on purpose: it is called at plan time, before anything is launched, and takes
0.2-0.9 s.
"""

from __future__ import annotations

import os
import posixpath
import shutil
from collections.abc import Callable, Sequence
from typing import IO

from returns.result import Result

from exedra_engine._core.executors.builtin import executor_profile
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.memory.fit_params import (
    FitMeasurement,
    companion_args,
    measurement_from,
    memory_settings,
    memory_settings_of,
)
from exedra_engine._core.outcome import as_result
from exedra_engine._core.plan.launch_plan import LaunchPlan, read_with
from exedra_engine.errors import EngineError, MeasureError

MEASURE_TIMEOUT = 60.0
"""Seconds the companion gets: it reads only the header, so this is for a slow disk."""
MAX_STDOUT = 64 << 10
"""Its figures are a few lines; more than this is not its figures."""
_KEEP_LOG_TAIL = 40
"""Lines of its log kept for an error message."""
VERBOSITY = ("--verbose",)
"""Debug verbosity: the engine then logs the context it sized for and each device's free
memory (`exedra_engine._core.memory.fit_params.ctx_from_log`, `device_free_from_log`); ~1000 lines,
of which only those are kept."""


def measure(
    plan: LaunchPlan,
    *,
    binary: str | None = None,
    host_free: int | None = None,
    timeout: float = MEASURE_TIMEOUT,
) -> Result[FitMeasurement, EngineError]:
    """What the engine would reserve for `plan`, measured by its companion (`binary`, else
    the one beside the plan's command, else on PATH). `host_free` is the host memory the
    probe found usable, recorded beside the figures. `MeasureError` when it cannot be made."""
    return as_result(_measure_plan, plan, binary, host_free, timeout)


def measured(
    plan: LaunchPlan,
    *,
    binary: str | None = None,
    host_free: int | None = None,
    timeout: float = MEASURE_TIMEOUT,
) -> FitMeasurement:
    """`measure` for the library's own callers: raises `MeasureError`."""
    return _measure_plan(plan, binary, host_free, timeout)


def _measure_plan(
    plan: LaunchPlan, binary: str | None, host_free: int | None, timeout: float
) -> FitMeasurement:
    from exedra_engine._shell.inspect import read_inventory

    profile = executor_profile(plan.spec.kind)
    model = _model_of(profile, plan)
    if not os.path.isfile(model):
        # Said here: the measuring binary's own words for it are "failed to load model".
        why = (
            "is a directory"
            if os.path.isdir(model)
            else "is not a regular file (a FIFO, a socket or a device)"
            if os.path.exists(model)
            else "does not exist"
        )
        raise MeasureError(f"{model}: {why}; a measurement loads the model file on this host")
    ctx = plan.model.context if plan.model else 0
    # The window matters only to a model with sliding-window layers; a header that cannot be
    # read is the companion's to report.
    inv = read_inventory(model).value_or(None)
    swa = inv is not None and any(inv.swa_layers)
    items = read_with(plan, profile).items
    return _measured(
        profile,
        model,
        lambda: memory_settings_of(profile, items, plan.env),
        binary=binary or find_companion(profile, plan.command),
        ctx=ctx,
        host_free=host_free,
        timeout=timeout,
        arch=inv.architecture if inv is not None else "",
        window=inv.sliding_window if inv is not None and swa else 0,
    )


def _model_of(profile: ExecutorProfile, plan: LaunchPlan) -> str:
    return next(
        (
            it.values[0]
            for it in read_with(plan, profile).items
            if it.key == profile.model_flag and it.values
        ),
        plan.spec.path,
    )


def find_companion(profile: ExecutorProfile, executor: str = "") -> str:
    """The measuring companion of `profile`'s executor: beside the executor (its real
    directory, then the directory it was named in), else on PATH; `MeasureError` if none."""
    name = profile.measure_binary
    if not name:
        raise MeasureError(f"{profile.binary} has no memory-measuring companion")
    dirs: list[str] = []
    if executor and os.sep in executor:
        dirs += [posixpath.dirname(os.path.realpath(executor)), posixpath.dirname(executor)]
    for d in dirs:
        candidate = posixpath.join(d, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    if found is None:
        beside = f" beside {executor} nor" if executor else ""
        raise MeasureError(
            f"{name} is not installed{beside} on PATH: it is built beside "
            f"{profile.binary} (scripts/install-executors.sh)"
        )
    return os.path.abspath(found)


def measure_model(
    profile: ExecutorProfile,
    model: str,
    args: Sequence[str] = (),
    env: Sequence[str] = (),
    *,
    binary: str,
    ctx: int = 0,
    host_free: int | None = None,
    timeout: float = MEASURE_TIMEOUT,
    arch: str = "",
    window: int = 0,
) -> FitMeasurement:
    """Run `binary` on `model` with the memory flags of `args`/`env` (a plan's); raises
    `MeasureError`. `ctx` is the context recorded when the engine's log does not say it;
    `arch` and `window` are the model's, for a shared cache's sliding-window layers (see
    `exedra_engine._core.memory.fit_params.companion_args`)."""
    return _measured(
        profile,
        model,
        lambda: memory_settings(profile, args, env),
        binary=binary,
        ctx=ctx,
        host_free=host_free,
        timeout=timeout,
        arch=arch,
        window=window,
    )


def _measured(
    profile: ExecutorProfile,
    model: str,
    read: Callable[[], tuple[str, ...]],
    *,
    binary: str,
    ctx: int,
    host_free: int | None,
    timeout: float,
    arch: str,
    window: int,
) -> FitMeasurement:
    from exedra_engine._shell.local.flag_tables import executor_table, executor_version

    table, origin = executor_table(profile, binary)
    if origin.source != "binary":
        raise MeasureError(f"{binary}: its flags cannot be read ({origin.note or 'no help'})")
    settings = read()
    passed = companion_args(
        profile,
        settings,
        accepts=lambda key: table.lookup(key) is not None,
        arch=arch,
        window=window,
    )
    argv = [binary, "--model", model, *passed, *profile.measure_args, *VERBOSITY]
    stdout, log = run_bounded(argv, _clean_env(profile), timeout)
    return measurement_from(
        stdout,
        log,
        model=model,
        args=passed,
        settings=settings,
        ctx=_asked_ctx(profile, passed) or ctx,
        build=executor_version(profile, binary),
        host_free=host_free,
    )


def _asked_ctx(profile: ExecutorProfile, passed: Sequence[str]) -> int:
    for it in profile.flags.split_items(passed, "measured args"):
        if it.key == profile.ctx_flag and it.values:
            try:
                return max(0, int(it.values[0]))
            except ValueError:
                return 0
    return 0


def _clean_env(profile: ExecutorProfile) -> dict[str, str]:
    # Inherited LLAMA_ARG_* variables would change what is measured without showing in argv;
    # the plan's own variables reach the companion as flags (memory_settings).
    prefix = profile.env_prefix
    return {k: v for k, v in os.environ.items() if not (prefix and k.startswith(prefix))}


def run_bounded(argv: Sequence[str], env: dict[str, str], timeout: float) -> tuple[str, str]:
    """Run `argv` (no shell, stdin closed, its own session) and return its stdout (at most
    `MAX_STDOUT` bytes) and the lines of its log (stderr) that matter: those that say the
    context and free memory, and the last few. Its process group is killed at `timeout` or
    when stdout overflows. Raises `MeasureError` when it cannot run or does not succeed."""
    import signal
    import subprocess

    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except (OSError, ValueError) as e:
        raise MeasureError(
            f"{argv[0]} cannot be run: {getattr(e, 'strerror', None) or e}"
        ) from None
    assert proc.stdout is not None and proc.stderr is not None
    out = bytearray()
    log = _LogLines()
    problem = _read_until_done(proc.stdout, proc.stderr, out, log, timeout)
    if problem:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
    code = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    text = log.text()
    if problem:
        raise MeasureError(f"{argv[0]} {problem}")
    if code != 0:
        said = _last_error(text)
        raise MeasureError(f"{argv[0]} failed (exit status {code})" + (f": {said}" if said else ""))
    return out.decode("utf-8", errors="replace"), text


def _read_until_done(
    stdout: IO[bytes], stderr: IO[bytes], out: bytearray, log: _LogLines, timeout: float
) -> str:
    """Read both pipes until they close, stdout into `out` and stderr into `log`; what went
    wrong ("" if nothing): the deadline passed, or stdout overflowed."""
    import selectors
    import time

    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(stdout, selectors.EVENT_READ)
        sel.register(stderr, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return f"did not finish within {timeout:g} s"
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                elif key.fileobj is stdout:
                    out += chunk
                    if len(out) > MAX_STDOUT:
                        return f"printed more than {MAX_STDOUT} bytes"
                else:
                    log.feed(chunk)
    return ""


class _LogLines:
    """A log read in chunks, keeping only the lines the measurement reads and a short tail."""

    _WANTED = (b"using device ", b"llama_context: n_ctx ")

    def __init__(self) -> None:
        self._partial = b""
        self._kept: list[bytes] = []
        self._tail: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()[-4096:]  # a line longer than this is nothing we read
        for line in lines:
            self._line(line)

    def _line(self, line: bytes) -> None:
        if any(w in line for w in self._WANTED) and len(self._kept) < 256:
            self._kept.append(line[:512])
        self._tail.append(line[:512])
        del self._tail[:-_KEEP_LOG_TAIL]

    def text(self) -> str:
        if self._partial:
            self._line(self._partial)
            self._partial = b""
        lines = [*self._kept, *(t for t in self._tail if t not in self._kept)]
        return b"\n".join(lines).decode("utf-8", errors="replace")


def _last_error(log: str) -> str:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() or "failed" in ln.lower()]
    said = (errors or lines or [""])[-1]
    return said[:300]
