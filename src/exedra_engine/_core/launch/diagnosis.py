"""Why a launch failed: the executor's exit and log tail, classified into a `NotReady`
subclass by the patterns of its profile (`ExitCause`, data). Pure.

Each pattern was taken from the real binary's output (llama-server 0.3.36, the
engine's own source build; whisper-server 1.8.5): see `exedra_engine._core.executors.profile`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final, Literal, TypeVar

from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import CauseKind, ExecutorProfile, ExitCause
from exedra_engine._core.memory.plan import MemoryPlan, PlaceMemory
from exedra_engine._core.memory.settings import MIB
from exedra_engine._core.plan.provenance import Source
from exedra_engine._core.secrets import REDACTED
from exedra_engine._core.struct import Value
from exedra_engine.errors import (
    AddressUnavailable,
    ArgumentRefused,
    ExitedUnexplained,
    IllegalInstruction,
    KilledBySignal,
    LibraryNotLoaded,
    LoadStalled,
    ModelNotLoaded,
    NotReady,
    OutOfMemory,
    ReadyTimeout,
)

PRIORITY: Final[tuple[CauseKind, ...]] = ("memory", "argument", "address", "library", "model")
"""When lines of several kinds appear, the first kind here is the cause: an allocation that
failed also makes "failed to create context" lines, a missing backend "failed to load model"."""

LOG_LINES: Final = 8
"""How many of the last log lines an error carries."""

SIGILL_HINT: Final = (
    "this binary was built for CPU instructions this machine lacks; rebuild it with "
    "ggml's runtime CPU dispatch (GGML_BACKEND_DL=ON, GGML_CPU_ALL_VARIANTS=ON), as "
    "scripts/install-executors.sh does"
)


class Found(Value, frozen=True, kw_only=True):
    """The cause found in a log: its kind, the fields its lines named, the first such line."""

    kind: CauseKind
    fields: tuple[tuple[str, str], ...]
    line: str

    def get(self, name: str) -> str:
        return next((v for k, v in self.fields if k == name), "")


def find_cause(causes: Sequence[ExitCause], log: Sequence[str]) -> Found | None:
    """The highest-priority kind of `causes` that matches a line of `log`, with the named
    fields of every matching line of that kind (the first value of each name wins)."""
    for kind in PRIORITY:
        fields: dict[str, str] = {}
        first = ""
        for cause in causes:
            if cause.kind != kind:
                continue
            for line in log:
                m = re.search(cause.pattern, line)
                if m is None:
                    continue
                first = first or line
                for name, value in m.groupdict().items():
                    if value:
                        fields.setdefault(name, value.strip())
                if cause.what:
                    fields.setdefault("what", cause.what)
        if first:
            return Found(kind=kind, fields=tuple(fields.items()), line=first)
    return None


class Exit(Value, frozen=True, kw_only=True):
    """How the executor ended, in plain values from the adapter."""

    command: str
    returncode: int
    how: str
    """``exit 1``, ``killed by SIGKILL``."""
    signal: str = ""
    """The name of the signal that ended it ("": none)."""
    log: tuple[str, ...] = ()
    host: str = ""
    port: int = 0


def layer_of(flag: str, sources: Sequence[Source], table: FlagTable | None = None) -> str:
    """The layer that set the flag the executor named (`flag`, as its log spells it: ``-c``,
    ``--ctx-size``, ``--ctx-size=N``), from the plan's provenance ("" unknown).

    A flag `table` knows is found by its key, whatever spelling the layer wrote, or by a
    variable that sets it; an unknown one by its spelling (the reader keeps such a token as
    written)."""
    name = flag.partition("=")[0]
    known = table.lookup(name) if table is not None else None
    if known is not None:
        f = known[0]
        return next((s.layer for s in sources if s.key == f.key or s.key in f.env), "")
    return next(
        (s.layer for s in sources if s.what == "arg" and not s.key and _spelled(s) == name), ""
    )


def _spelled(s: Source) -> str:
    return s.text.split(" ", 1)[0].partition("=")[0]


def exit_error(
    exit: Exit,
    found: Found | None,
    *,
    layer: str = "",
    suggestion: str = "",
    memory: MemoryPlan | None = None,
) -> NotReady:
    """The `NotReady` subclass for an executor that ended before it was ready. `layer` and
    `suggestion` complete a refused argument (see `layer_of`, `did_you_mean.did_you_mean`)."""
    head = f"{_name(exit.command)} exited before it was ready ({exit.how})"
    log = exit.log[-LOG_LINES:]
    if exit.signal == "SIGILL":
        return _made(IllegalInstruction, f"{head}: {SIGILL_HINT}", exit, log)
    if found is not None and found.kind == "argument":
        return _argument(head, exit, found, layer=layer, suggestion=suggestion)
    if found is not None and found.kind == "memory":
        return _memory(head, exit, found, memory)
    if found is not None:
        return _from_found(head, exit, found)
    if exit.signal:
        hint = (
            " (the kernel's out-of-memory killer sends SIGKILL)" if exit.signal == "SIGKILL" else ""
        )
        err = _made(KilledBySignal, f"{head}{hint}", exit, log)
        err.signal = -exit.returncode
        return err
    return _made(ExitedUnexplained, f"{head}: no known cause in its log", exit, log)


def _from_found(head: str, exit: Exit, found: Found) -> NotReady:
    log = exit.log[-LOG_LINES:]
    if found.kind == "address":
        host = found.get("host") or exit.host
        port = found.get("port") or str(exit.port)
        return _made(
            AddressUnavailable,
            f"{head}: it could not bind {host}:{port} (the port is in use, or the address is "
            "not this host's)",
            exit,
            log,
        )
    if found.kind == "library":
        lib = found.get("lib")
        what = f"{lib}: {found.get('reason')}" if lib and found.get("reason") else lib
        what = what or found.get("what") or found.line.strip()
        return _made(LibraryNotLoaded, f"{head}: a library could not be loaded: {what}", exit, log)
    reason = found.get("reason") or found.line.strip()
    path = found.get("path")
    where = f" ({path})" if path and path not in reason else ""
    return _made(
        ModelNotLoaded, f"{head}: the model could not be loaded{where}: {reason}", exit, log
    )


def _argument(
    head: str, exit: Exit, found: Found, *, layer: str, suggestion: str
) -> ArgumentRefused:
    flag, reason = found.get("flag"), found.get("reason")
    if flag:
        said = f"it refused the argument {flag}" + (f" ({reason})" if reason else "")
    else:
        said = "it refused an argument it did not name" + (f" ({reason})" if reason else "")
    notes = [n for n in (f"set by {layer}" if layer else "", _suggest(suggestion, flag)) if n]
    cause = f"{head}: {said}" + (f"; {'; '.join(notes)}" if notes else "")
    log = exit.log[-LOG_LINES:]
    if found.line not in log:  # said before a long usage text (whisper-server's)
        log = (found.line, *exit.log[-(LOG_LINES - 1) :])
    if flag:
        # A refused `--flag=value` is no known key flag, so redaction by name missed its value,
        # which may be a key under a mistyped name (`--api-kee=sk-...`): never echo it.
        inline = re.compile(re.escape(flag) + r"=\S*")
        log = tuple(inline.sub(f"{flag}={REDACTED}", line) for line in log)
    err = _made(ArgumentRefused, cause, exit, log)
    err.flag, err.layer, err.suggestion = flag, layer, suggestion if suggestion != flag else ""
    return err


def _suggest(suggestion: str, flag: str) -> str:
    return f"did you mean {suggestion}?" if suggestion and suggestion != flag else ""


def _memory(head: str, exit: Exit, found: Found, memory: MemoryPlan | None) -> OutOfMemory:
    mib = _mib(found)
    what = found.get("what")
    size = f"{mib:,.0f} MiB" if mib is not None else "an allocation"
    said = (
        f"out of memory: {size}" + (f" for the {what}" if what else "") + " could not be allocated"
    )
    planned, part = _planned_mib(memory, found.get("place"), found.get("device"), what)
    if planned is not None and memory is not None:
        said += f" (the plan expected {planned:,.0f} MiB {part} at context {memory.ctx})"
    err = _made(OutOfMemory, f"{head}: {said}", exit, exit.log[-LOG_LINES:])
    err.mib, err.what, err.planned_mib = mib, what, planned
    return err


def _mib(found: Found) -> float | None:
    if found.get("bytes").isdigit():
        return int(found.get("bytes")) / MIB
    try:
        return float(found.get("mib"))
    except ValueError:
        return None


def _planned_mib(
    memory: MemoryPlan | None, place: str, device: str, what: str
) -> tuple[float | None, str]:
    """The plan's figure for the place that ran out, and for what: the part the allocation
    was for when the line says (KV cache, weights, compute), else the place's total."""
    if memory is None:
        return None, ""
    at: PlaceMemory | None = memory.host
    if device or (place and place.upper() != "CPU"):
        name = place or f"CUDA{device}"
        at = next(
            (d for d in memory.devices if d.name == name or (device and d.name.endswith(device))),
            None,
        )
    if at is None:
        return None, ""
    parts = at.reserved_parts if at is not memory.host else at.parts
    for key, label in (
        ("kv", "for the KV cache"),
        ("weight", "for the weights"),
        ("comput", "for compute"),
    ):
        if key in what.lower():
            figure = getattr(parts, {"kv": "kv", "weight": "weights", "comput": "compute"}[key])
            return figure / MIB, label
    return (at.reserved if at is not memory.host else at.total) / MIB, "in all"


def classify(
    exit: Exit,
    profile: ExecutorProfile,
    suggest: Callable[[str], str],
    *,
    sources: Sequence[Source] = (),
    memory: MemoryPlan | None = None,
) -> NotReady:
    """The whole diagnosis of an early exit, for every adapter: the cause from `profile`'s
    patterns, a refused flag's layer from `sources` and its did-you-mean from `suggest` (the
    installed binary's table: blocking, so an adapter calls this off its event loop)."""
    found = find_cause(profile.exit_causes, exit.log)
    flag = found.get("flag") if found is not None and found.kind == "argument" else ""
    return exit_error(
        exit,
        found,
        layer=layer_of(flag, sources, profile.flags) if flag else "",
        suggestion=suggest(flag) if flag else "",
        memory=memory,
    )


def not_answering(
    kind: Literal["timeout", "stalled"],
    *,
    command: str,
    path: str,
    url: str,
    seconds: float,
    log: Sequence[str],
) -> NotReady:
    """The executor runs but its ready path did not answer: within the budget (`seconds`),
    or it wrote nothing for `seconds` (stalled)."""
    name = _name(command)
    if kind == "stalled":
        cause = (
            f"{name} wrote nothing for {seconds:g} s while loading and did not answer {path} "
            f"on {url}: the load looks hung"
        )
        return _made(LoadStalled, cause, None, log[-LOG_LINES:])
    cause = f"{name} did not answer {path} on {url} within {seconds:g} s"
    return _made(ReadyTimeout, cause, None, log[-LOG_LINES:])


def _name(command: str) -> str:
    # The binary's name: its directory is in the plan, and would push the cause off the line.
    return command.rsplit("/", 1)[-1]


_E = TypeVar("_E", bound=NotReady)


def _made(cls: type[_E], cause: str, exit: Exit | None, log: Sequence[str]) -> _E:
    message = cause + ("\nlast log lines:\n" + "\n".join(log) if log else "")
    return cls(message, cause=cause, returncode=exit.returncode if exit else None, log=tuple(log))
