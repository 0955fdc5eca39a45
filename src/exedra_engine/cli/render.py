"""What the command line prints: human text that any terminal shows safely, JSON that any
UTF-8 stream can write, and plans with their keys redacted."""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import msgspec

from exedra_engine._core.executors.builtin import BUILTIN, LLAMA
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.memory.explain import size_text as mem_size
from exedra_engine._core.memory.plan import MemoryPlan
from exedra_engine._core.plan.explained import redact_plan
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.secrets import looks_secret, redact_text
from exedra_engine.errors import EngineError, MemberFailed, NotReady

if TYPE_CHECKING:
    from exedra_engine._core.config.findings import Finding
    from exedra_engine._core.plan.provenance import Source

PROG = "exedra-engine"


# Compiled on first use (re caches them): 0.7 ms a plain --json cold start never spends.
_UNSHOWN = "[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
_SURROGATE = "[\ud800-\udfff]"


def _escape(m: re.Match[str]) -> str:
    c = m.group()
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c) or (
        f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
    )


def shown(text: str) -> str:
    """`text` as one line of human output: control characters, bidi overrides and lone
    surrogates written as backslash escapes (``\\x1b``, ``\\n``, ``\\udcff``)."""
    return re.sub(_UNSHOWN, _escape, text)


# The values given on this command line that errors must not echo (see `hide_values`):
# CLI state, set once per main() call, never in the pure core.
_hidden: dict[str, str] = {}
_by_look = [True]


def is_variable_name(value: str) -> bool:
    """Whether `value` is an environment variable's name in the conventional form (upper
    case, digits, underscores): a form no API key takes."""
    return re.fullmatch(r"[A-Z_][A-Z0-9_]*", value) is not None


def has_form(value: str) -> bool:
    """Whether a value looks like what the CLI's free-form options take, so that an error may
    quote it: a path, URL, address or file name (a ``/``, ``.`` or ``:``), a number, or a
    variable name in the conventional form. An API key is none of these (its characters are
    letters, digits, ``-`` and ``_``), so a key typed in the wrong place is never echoed.
    Nor is a value the secret walker finds a secret in by its look (a JWT, an AWS secret, a
    URL's credentials: `exedra_engine._core.secrets.looks_secret`), whatever form it has."""
    if looks_secret(value):
        return False
    return any(c in value for c in "/.:") or value.lstrip("+-").isdigit() or is_variable_name(value)


HIDDEN_MIN = 8
"""Values shorter than this are not masked: no key is that short, and a short value (``--name
n``) would mask every word it occurs in."""


def is_host_label(value: str) -> bool:
    """Whether `value` is a one-label host name of lower-case letters and hyphens
    (``localhost``, ``gpu-box``): what ``--host`` takes, and a form no generated key takes
    (those mix in digits or capitals)."""
    return re.fullmatch(r"[a-z]([a-z-]{0,61}[a-z])?", value) is not None


def hide_values(given: dict[str, str], *, by_look: bool = True) -> None:
    """Name the values (value -> the option that took it) that `fail` masks in errors, and
    say whether errors hide what is secret by its look (not with ``--show-secrets``)."""
    _by_look[0] = by_look
    _hidden.clear()
    _hidden.update(
        {
            v: o
            for v, o in given.items()
            if looks_secret(v)
            or (
                len(v) >= HIDDEN_MIN
                and not has_form(v)
                and not (o == "--host" and is_host_label(v))
            )
        }
    )


def unechoed(text: str) -> str:
    """`text` with every hidden value replaced, where it stands as a token (not inside a
    longer word), by the name of the option that took it; then whatever is secret by its look
    (a key shape, a URL's credentials), wherever the error took it from."""
    for value in sorted(_hidden, key=len, reverse=True):
        if value in text:
            token = re.compile(f"(?<![A-Za-z0-9_]){re.escape(value)}(?![A-Za-z0-9_])")
            text = token.sub(f"<the value of {_hidden[value]}, not shown>", text)
    return redact_text(text, ()) if _by_look[0] else text


def fail(err: EngineError, code: int = 2, *, as_json: bool = False) -> int:
    """Report `err`: its first line, then (for an executor that never became ready) its
    last log lines as lines of their own, each escaped; as ``{"error": {...}}`` on stdout
    with `as_json`."""
    if as_json:
        sys.stdout.write(json_text({"error": error_body(err)}, indent=False) + "\n")
        return code
    # A group member's failure: its own error's lines, the member named first.
    inner = err.cause if isinstance(err, MemberFailed) else err
    if isinstance(inner, NotReady):
        head = str(err) if inner is not err else inner.cause
        lines = [f"{PROG}: error: {shown(unechoed(head))}"]
        if inner.log:
            lines.append("last log lines of the executor:")
            lines += [f"  {shown(unechoed(line))}" for line in inner.log]
        print("\n".join(lines), file=sys.stderr)
        return code
    print(f"{PROG}: error: {shown(unechoed(str(err)))}", file=sys.stderr)
    return code


def error_body(err: EngineError) -> dict[str, object]:
    """An error as JSON: its kind, its cause, and the executor's last log lines (a group
    member's failure: its own error's, with ``member`` naming it)."""
    if isinstance(err, MemberFailed):
        return {**error_body(err.cause), "member": err.member}
    if not isinstance(err, NotReady):
        return {"kind": type(err).__name__, "cause": unechoed(str(err)), "log": []}
    body: dict[str, object] = {
        "kind": err.kind,
        "cause": unechoed(err.cause),
        "log": [unechoed(line) for line in err.log],
    }
    for name in ("flag", "layer", "suggestion", "mib", "what", "planned_mib", "signal"):
        value = getattr(err, name, None)
        if value not in (None, ""):
            body[name] = value
    if err.returncode is not None:
        body["returncode"] = err.returncode
    return body


def json_text(value: object, *, indent: bool = True) -> str:
    """`value` as JSON text that any UTF-8 stream can write, indented or on one line: a lone
    surrogate in a string (a path's undecodable byte) is written as its ``\\udcXX`` escape."""
    try:
        data = msgspec.json.encode(value)
        return (msgspec.json.format(data) if indent else data).decode()
    except UnicodeEncodeError:
        import json  # only here: a cold start that prints plain JSON never loads it

        text = json.dumps(
            msgspec.to_builtins(value),
            ensure_ascii=False,
            indent=2 if indent else None,
            separators=None if indent else (",", ":"),
        )
        return re.sub(_SURROGATE, lambda m: f"\\u{ord(m.group()):04x}", text)


def print_json(value: object) -> None:
    sys.stdout.write(json_text(value) + "\n")


def size_or_unknown(n: int) -> str:
    if n <= 0:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def shown_plan(
    plan: LaunchPlan,
    show_secrets: bool,
    sources: Sequence[Source] = (),
    *,
    executors: Executors = BUILTIN,
) -> LaunchPlan:
    """The plan as printed: keys redacted unless asked for (with the plan's `sources`, also
    where a caller copied a key into another flag)."""
    return plan if show_secrets else redact_plan(plan, sources, executors=executors)


def print_plan(plan: LaunchPlan, executors: Executors = BUILTIN) -> None:
    print(f"command   {shown(plan.command)}")
    print("args      " + _argv_lines([shown(t) for t in plan.args]))
    for i, e in enumerate(plan.env):
        print(("env       " if i == 0 else "          ") + shown(e))
    print(
        f"endpoint  {shown(plan.url)}  (ready: {shown(plan.ready)}"
        + (", scanned port" if plan.port_scanned else "")
        + ")"
    )
    print(f"api key   {'set' if plan.api_key else 'none (unauthenticated)'}")
    if plan.model is not None:
        m = plan.model
        print(
            f"model     {shown(m.architecture)} {shown(m.name)} {shown(m.quant)}".rstrip()
            + f", {m.blocks} blocks, context {m.context}"
        )
    else:
        print(f"model     {_no_header(plan, executors)}")
    if plan.memory is not None:
        for i, line in enumerate(memory_lines(plan.memory)):
            print(("memory    " if i == 0 else "          ") + line)
    print(f"load      {load_line(plan)}")


def _no_header(plan: LaunchPlan, executors: Executors) -> str:
    """Why the plan has no model header: for an executor whose models are not GGUF files,
    plainly that none was expected (it reads like an error otherwise)."""
    profile = executors.profile(plan.spec.kind) if plan.spec.kind in executors else None
    if profile is not None and not profile.gguf:
        return (
            f"no header to read: {shown(profile.binary)}'s models are not GGUF files, as "
            "expected (nothing is wrong)"
        )
    return "header not read (file absent or not GGUF)"


def load_line(plan: LaunchPlan) -> str:
    """How long `launch` waits for this plan's executor to become ready, and why."""
    from exedra_engine._core.launch.budget import STALL, load_limits, plan_bytes

    size = plan_bytes(plan)
    limits = load_limits(plan)
    read = f"{mem_size(size)} to read" if size else "size unknown"
    return (
        f"ready within {limits.budget:g} s ({read}; launch --ready-timeout overrides), "
        f"or {STALL} s without output"
    )


MEMORY_WORDS = (
    "the memory line: 'resident peak' is the host memory the executor is expected to hold "
    "once loaded and serving (its peak RSS); 'prompt cache' is "
    f"{LLAMA.binary}'s {LLAMA.memory_flags['cache_ram']}, "
    "prompts kept in host memory for reuse, which fills with use up to its size (the sum is "
    "what a memory limit is sized from); 'reserved' (a GPU's line) is what the executor "
    "allocates on the device, the figure a GPU fit is judged by"
)
"""The words of `memory_lines`, for ``plan --help``."""


def memory_lines(mem: MemoryPlan) -> list[str]:
    """One line for the host and one per device: the figure each is judged by.

    The host's figure is its expected resident peak, shown apart from the prompt cache
    (``--cache-ram``), which fills with use up to its size, and the sum of both (what a
    cgroup limit is sized from). What llama.cpp reserves on the host is left out: it counts
    pages never touched (a full batch of logits) and judges nothing; a GPU is judged by
    what it reserves, so each device shows that."""
    h = mem.host
    cache = h.parts.prompt_cache
    peak = f"host {mem_size(h.total - cache)} resident peak"
    if cache:
        peak += f" + up to {mem_size(cache)} prompt cache = {mem_size(h.total)}"
    lines = [
        f"ctx {mem.ctx}, {mem.source}: {peak}"
        + (f"; host has {mem_size(h.available)}" if h.available is not None else "")
    ]
    for d in mem.devices:
        lines.append(
            f"{shown(d.name)} {mem_size(d.reserved)} reserved"
            + (f", {mem_size(d.available)} free" if d.available is not None else "")
        )
    return lines


def _argv_lines(args: Sequence[str]) -> str:
    lines: list[str] = []
    for tok in args:
        if (tok.startswith("-") and not tok.lstrip("-").replace(".", "").isdigit()) or not lines:
            lines.append(tok)
        else:
            lines[-1] += " " + tok
    return "\n          ".join(lines)


def finding_line(f: Finding) -> str:
    """One finding as a compiler prints one: ``file:line: severity: path: message [code]``
    (``path: severity: message [code]`` for the caller's args, which are in no file)."""
    hint = f" (did you mean {f.suggestion}?)" if f.suggestion else ""
    if not f.file:
        return shown(f"{f.path}: {f.severity}: {f.message}{hint} [{f.code}]")
    loc = f"{f.file}:{f.line}" if f.line else f.file
    return shown(f"{loc}: {f.severity}: {f.path}: {f.message}{hint} [{f.code}]")


def findings_summary(findings: Sequence[Finding]) -> str:
    errors = sum(f.severity == "error" for f in findings)
    notes = sum(f.severity == "note" for f in findings)
    warnings = len(findings) - errors - notes
    text = f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"
    return text + (f", {notes} note{'s' * (notes != 1)}" if notes else "")


def findings_heading(findings: Sequence[Finding]) -> str:
    """A line's severity and its count of `findings`, no zero counted: ``warning: 1 error,
    2 warnings``, ``note: 1 note`` (only notes make a note line, not a warning that
    announces no warning)."""
    counts = Counter(f.severity for f in findings)
    warnings = len(findings) - counts["error"] - counts["note"]
    named = [(counts["error"], "error"), (warnings, "warning"), (counts["note"], "note")]
    text = ", ".join(f"{n} {word}{'s' * (n != 1)}" for n, word in named if n)
    return f"{'note' if counts['note'] == len(findings) else 'warning'}: {text}"


class Report(NamedTuple):
    """What a command found, as data: `show` prints `value` as JSON, or `lines` as text.

    `lines` is consumed only for text, so a generator defers what only the text needs (a
    probe's version questions to the binaries, YAML for a config) and prints as it goes."""

    value: object
    lines: Iterable[str]


def show(report: Report, as_json: bool) -> int:
    """The one renderer of the commands that return data: exit status 0."""
    if as_json:
        print_json(report.value)
    else:
        for line in report.lines:
            print(line)
    return 0
