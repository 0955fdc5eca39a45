"""`weight_buffers`: one short real load of a plan's model by its own binary, to read which
buffers the build puts its weights in (`exedra_engine._core.memory.extra_buffers`), cached per
binary, model and flags; `with_build_buffers` adds the copies to a plan's host memory.

The load runs the plan's own argv with ``--no-warmup`` and debug verbosity, on port 0, no shell,
stdin closed, in its own session; it is stopped (its whole group killed) as soon as the weights
are placed (the first ``llama_context`` line after them), at the latest after `LOAD_TIMEOUT`.
Only lines that name a weight buffer are kept. A few seconds for a small model, once: the
answer is kept in ``~/.cache/exedra-engine/weight-buffers`` under a key of the binary's and the
model's path, size and modification time, and the argv and env.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from msgspec.structs import replace

from exedra_engine._core.memory.extra_buffers import (
    WeightBuffers,
    buffers_from_log,
    with_extra_buffers,
)
from exedra_engine._core.values import LaunchPlan
from exedra_engine.errors import MeasureError

LOAD_TIMEOUT: Final = 120.0
"""Seconds the short load gets (a large model from a slow disk)."""
_MAX_KEPT: Final = 256
_CACHE_VERSION: Final = 1


def buffers_cache_dir() -> Path:
    """Where the answers are kept, one JSON file each."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "exedra-engine" / "weight-buffers"


def _identity(path: str) -> str:
    st = os.stat(path)
    return f"{os.path.realpath(path)}:{st.st_size}:{st.st_mtime_ns}"


def _key(binary: str, model: str, args: Sequence[str], env: Sequence[str]) -> str:
    text = json.dumps([_CACHE_VERSION, _identity(binary), _identity(model), list(args), list(env)])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def weight_buffers(
    binary: str,
    model: str,
    args: Sequence[str],
    env: Sequence[str] = (),
    *,
    timeout: float = LOAD_TIMEOUT,
) -> WeightBuffers:
    """Which buffers `binary` puts `model`'s weights in with the plan's `args` (its whole argv,
    the model flag included) and `env` (``NAME=VALUE``, on top of this process's, e.g.
    ``GGML_VK_VISIBLE_DEVICES``): from the cache, else from one short load. Raises
    `MeasureError` when the load names no buffer."""
    for path, what in ((binary, "executor"), (model, "model")):
        if not os.path.isfile(path):
            raise MeasureError(f"{path}: the {what} of the load is not a file")
    args = _without_port(args)
    key = _key(binary, model, args, env)
    cached = buffers_cache_dir() / f"{key}.json"
    try:
        data = json.loads(cached.read_text())
        return WeightBuffers(
            buffers=tuple((str(n), int(b)) for n, b in data["buffers"]), source=str(data["source"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        pass
    log = _short_load([binary, *args, "--no-warmup", "--verbose", "--port", "0"], env, timeout)
    found = buffers_from_log(log)
    if not found:
        tail = log.strip().splitlines()[-1:] or ["(no output)"]
        raise MeasureError(f"{binary} loaded {model} without naming a weight buffer: {tail[0]}")
    wb = WeightBuffers(
        buffers=found, source=f"{Path(binary).name}'s own load of {Path(model).name}, {binary}"
    )
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"buffers": [list(b) for b in wb.buffers], "source": wb.source}))
    tmp.replace(cached)
    return wb


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


def _spawn(argv: Sequence[str], env: Sequence[str]) -> subprocess.Popen[bytes]:
    full = dict(os.environ)
    for entry in env:
        name, sep, value = entry.partition("=")
        if sep:
            full[name] = value
    try:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=full,
            start_new_session=True,
        )
    except OSError as e:
        raise MeasureError(f"{argv[0]} cannot be run: {e.strerror or e}") from None


def _short_load(argv: Sequence[str], env: Sequence[str], timeout: float) -> str:
    proc = _spawn(argv, env)
    assert proc.stderr is not None
    seen = _Placement()
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stderr, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not sel.select(max(0.0, deadline - time.monotonic())):
                    break
                chunk = os.read(proc.stderr.fileno(), 1 << 16)
                if not chunk:
                    break
                if seen.feed(chunk):
                    return "\n".join(seen.kept)
        if not seen.placed and proc.poll() is None:
            raise MeasureError(f"{argv[0]} did not place the weights within {timeout:g} s")
        return "\n".join([*seen.kept, seen.last])
    finally:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stderr.close()


def with_build_buffers(
    plan: LaunchPlan, *, timeout: float = LOAD_TIMEOUT
) -> tuple[LaunchPlan, str]:
    """`plan` with its build's extra host copies of the weights counted in its memory, and
    the note that says what was added and where the figures came from (the plan unchanged
    when it has no memory figures or no model file here). Raises `MeasureError`."""
    if plan.memory is None or plan.model is None:
        return plan, "no memory plan: nothing added"
    wb = weight_buffers(plan.command, plan.model.path, plan.args, plan.env, timeout=timeout)
    memory, note = with_extra_buffers(plan.memory, wb)
    return replace(plan, memory=memory), note
