"""What ``launch`` says of itself: where the executor's log goes, the ready lines (model id,
endpoint, memory planned, a curl command to paste) and the refusal of a flag the installed
binary does not take. Pure but for `log_sink` and `kept_log_path`, which read the terminal and
the environment."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys
from collections.abc import Sequence
from typing import Final, NamedTuple

from exedra_engine._core.config.findings import Finding, TableOrigin
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine.errors import ArgumentRefused

# One request per capability, as the executors' APIs define them (OpenAI-compatible for the
# llama.cpp ones, whisper.cpp's own for speech): (path, curl arguments after the URL).
_JSON: Final = ("-H", "Content-Type: application/json")
REQUESTS: Final[dict[str, tuple[str, tuple[str, ...]]]] = {
    "llm": (
        "/v1/completions",
        (*_JSON, "-d", '{"prompt": "The capital of France is", "max_tokens": 16}'),
    ),
    "vlm": (
        "/v1/chat/completions",
        (*_JSON, "-d", '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}'),
    ),
    "embeddings": ("/v1/embeddings", (*_JSON, "-d", '{"input": "hello"}')),
    "rerank": ("/v1/rerank", (*_JSON, "-d", '{"query": "hi", "documents": ["hello", "bye"]}')),
    "asr": ("/inference", ("-F", "file=@audio.wav", "-F", "response_format=json")),
}
"""llm asks for a completion, not a chat: a base model (no chat template) answers it sensibly,
an instruction model too."""

_SAFE_VAR: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class LogSink(NamedTuple):
    """Where the executor's log goes: `path` ("" for stderr) and why, in words."""

    path: str
    why: str


def kept_log_path(plan: LaunchPlan) -> str:
    """The file a launch keeps its executor's log in when it is not shown: one per model id
    and port, under ``${XDG_STATE_HOME:-~/.local/state}/exedra-engine/logs`` (overwritten by
    the next launch of the same id and port)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    stem = os.path.splitext(os.path.basename(plan.spec.path))[0]
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", plan.spec.id or stem).strip("._") or "model"
    return os.path.join(base, "exedra-engine", "logs", f"{name}-{plan.port}.log")


def log_sink(a: argparse.Namespace, plan: LaunchPlan, tty: bool | None = None) -> LogSink:
    """``--log-file`` when given; stderr with ``--verbose``, or when stderr is no terminal
    (a service manager's journal keeps it); else, on a terminal or with ``--quiet``, a kept
    file (`kept_log_path`): quiet, yet there to read when something goes wrong."""
    if a.log_file:
        return LogSink(a.log_file, "--log-file")
    if getattr(a, "verbose", False):
        return LogSink("", "--verbose")
    on_tty = sys.stderr.isatty() if tty is None else tty
    if not on_tty and not a.quiet:
        return LogSink("", "stderr is not a terminal")
    return LogSink(kept_log_path(plan), "--quiet" if a.quiet else "kept quiet on a terminal")


def curl_command(plan: LaunchPlan, url: str, executors: Executors, *, model: str = "") -> str:
    """A curl command that asks the ready executor one thing it serves; its key (if any) is
    the variable it was read from, ``$VAR``, never its value. `model`: the JSON body names it
    first (``"model": ...``), as a router needs to know which of its models is asked."""
    caps = tuple(plan.spec.capabilities) or tuple(executors.profile(plan.spec.kind).capabilities)
    cap = next((c for c in caps if c in REQUESTS), "")
    if not cap:
        return ""
    path, args = REQUESTS[cap]
    if model and "-d" in args:
        import json  # only a router's curl line needs it: not paid by every cold plan

        i = args.index("-d") + 1
        body = {"model": model, **json.loads(args[i])}
        args = (*args[:i], json.dumps(body), *args[i + 1 :])
    profile = executors.profile(plan.spec.kind)
    # A prefix the plan put before the ready path (whisper-server's --request-path) is the
    # prefix of every path it serves.
    prefix = (
        plan.ready[: -len(profile.ready_path)] if plan.ready.endswith(profile.ready_path) else ""
    )
    words = ["curl", "-s", url + prefix + path]
    auth = ""
    if plan.api_key:
        var = plan.key_env if _SAFE_VAR.fullmatch(plan.key_env) else "API_KEY"
        # Double quotes: the shell expands the variable, the command shows only its name.
        auth = f' -H "Authorization: Bearer ${var}"'
    return " ".join(shlex.quote(w) for w in words) + auth + " " + shlex.join(args)


def auth_note(plan: LaunchPlan, executors: Executors) -> str:
    """What a plan's executor lets anyone do for want of an API key: "" when it has one,
    or its executor takes none; else that it is unauthenticated, and which web pages may
    call it (only this machine's where the plan passes ``--cors-origins localhost``)."""
    p = executors.profile(plan.spec.kind)
    keyed = plan.api_key or any(
        t == f or t.startswith(f"{f}=")
        for t in plan.args
        for f in (p.key_flag, p.key_file_flag)
        if f
    )
    if keyed or not p.has_api_key:
        return ""
    said = "unauthenticated: anyone who reaches its address may call it"
    pair = (p.cors_flag, p.cors_local)
    if p.cors_flag and any(plan.args[i : i + 2] == pair for i in range(len(plan.args))):
        return (
            f"{said}; web pages may call it only from this machine ({p.cors_flag} "
            f"{p.cors_local}, which a layer's own {p.cors_flag} overrides)"
        )
    return f"{said}"


def ready_lines(
    plan: LaunchPlan,
    *,
    url: str,
    pid: int,
    sink: LogSink,
    executors: Executors,
    memory: Sequence[str] = (),
    stops: str = "; Ctrl-C stops it",
    tries: Sequence[str] | None = None,
    width: int = 0,
) -> list[str]:
    """What ``launch`` prints once the executor is ready: model id and endpoint, the memory
    planned, a curl command (`tries`: these instead, one line each), and where the log is;
    `stops` ends the first line (a group's members say it once for all); `width` pads the
    model id (a group's members' URLs in one column)."""
    # The id requests name: the plan's, else the model path (llama-server's default id).
    model = plan.spec.id or plan.spec.path
    lines = [f"ready     {model:<{width}} at {url}  (pid {pid}){stops}"]
    if memory:
        lines.append(f"memory    {memory[0]}")
        lines.extend(f"          {m}" for m in memory[1:])
    if tries is not None:
        lines += [f"try       {t}" for t in tries]
    elif curl := curl_command(plan, url, executors):
        lines.append(f"try       {curl}")
        if plan.api_key and not _SAFE_VAR.fullmatch(plan.key_env):
            lines.append("          (set API_KEY to the key this plan was given)")
    if note := auth_note(plan, executors):
        lines.append(f"auth      {note}")
    if sink.path:
        lines.append(f"log       {sink.path}  ({sink.why}; --verbose shows it here)")
    return lines


def refusal(findings: Sequence[Finding], origin: TableOrigin) -> ArgumentRefused | None:
    """Why nothing may start: the errors the installed binary's own ``--help`` finds in the
    layers (a flag it does not know, a value it refuses...), the first named with its layer
    (`ArgumentRefused`, as if the executor had refused it, but before it is started); None
    when the binary's table was not read (the bundled one only warns) or finds no error."""
    if origin.source != "binary":
        return None
    errors = [f for f in findings if f.severity == "error"]
    if not errors:
        return None
    first = errors[0]
    hint = f" (did you mean {first.suggestion}?)" if first.suggestion else ""
    more = f"; and {len(errors) - 1} more (plan --explain lists them)" if len(errors) > 1 else ""
    err = ArgumentRefused(
        f"{first.token} in {first.where}: {first.message}{hint} [{first.code}], judged by "
        f"{origin.describe()}; nothing was started{more}"
    )
    err.flag, err.layer, err.suggestion = first.token, first.where, first.suggestion
    return err


def not_runnable_here(command: str) -> str:
    """Why this host cannot run `command` ("" if it can), said before anything is started."""
    if not os.path.isfile(command):
        return "does not exist" if not os.path.exists(command) else "is not a file"
    return "" if os.access(command, os.X_OK) else "is not executable"
