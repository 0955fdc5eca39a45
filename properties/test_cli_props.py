"""Random argument vectors to `exedra-engine plan`: exit 0 with a plan, or exit 2 with a
one-line message; never a traceback (issue 5, hostile command lines)."""

from __future__ import annotations

import atexit
import contextlib
import functools
import io
import itertools
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import event, given
from hypothesis import strategies as st
from tests.conftest import cli

from exedra_engine import LaunchPlan
from exedra_engine.cli import main
from exedra_engine.testing import write_tiny_llama

OPTIONS = [
    "--model",
    "--kind",
    "--id",
    "--config",
    "--ctx",
    "--threads",
    "--port",
    "--host",
    "--no-gpu",
    "--ui",
    "--api-key-env",
    "--arg",
    "--env",
    "--json",
    "--explain",
    "--port-base",
    "--capability",
    "--run-arg",
    "--executor",
    "--no-config",
    "--show-secrets",
    "-h",
]
tokens = st.one_of(
    st.sampled_from(OPTIONS),
    st.sampled_from(["llama", "transcribe", "x", "0", "-1", "99999", "A=B", "=", "--"]),
    st.text(max_size=12),
)


@given(st.lists(tokens, max_size=10))
def test_random_argv(argv: list[str]) -> None:
    code, out, err = cli("plan", *argv)
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("exedra-engine")
    else:
        assert out.strip()


@given(st.lists(tokens, max_size=6), st.sampled_from(["llama", "transcribe"]))
def test_random_argv_around_a_valid_request(argv: list[str], kind: str) -> None:
    base = [
        "plan",
        "--model",
        "/nonexistent/m.gguf",
        "--kind",
        kind,
        "--no-config",
        "--executor",
        "/usr/bin/true",
        "--json",
    ]
    full = [*base, *argv]
    code, out, err = cli(*full)
    assert code in (0, 2), (code, err)
    assert "Traceback" not in err
    if code == 0 and "-h" not in argv and "--explain" not in argv:
        plan: Any = msgspec.json.decode(out, type=LaunchPlan)
        # The last --executor given wins, as argparse reads it.
        executors = [t for prev, t in itertools.pairwise(full) if prev == "--executor"]
        assert plan.command == executors[-1]
    elif code == 2:
        assert err.count("\n") == 1


# -- non-UTF-8 argv under a strict UTF-8 stdout (issue 14, D6) ------------------------------

# What Python makes of argv bytes that are not UTF-8 on Linux: os.fsdecode's lone surrogates,
# alone, glued to readable text, or the few values argparse treats specially.
raw = st.one_of(
    st.binary(max_size=12).map(os.fsdecode),
    st.builds(
        lambda a, b, c: a + os.fsdecode(b) + c,
        st.text(max_size=4),
        st.binary(min_size=1, max_size=4),
        st.text(max_size=4),
    ),
    st.sampled_from(["--", "-", "", "=", os.fsdecode(b"\xff"), os.fsdecode(b"-\x80=\xc3")]),
)
PLAN = ["plan", "--kind", "llama", "--executor", "/usr/bin/true", "--no-port-check"]
COMMANDS = (
    ["probe"],
    ["probe", "--json"],
    ["inspect"],
    ["inspect", "--json"],
    ["config"],
    ["config", "--json"],
    PLAN,
    [*PLAN, "--json"],
    [*PLAN, "--explain"],
    [*PLAN, "--explain", "--json"],
)
PLAN_OPTIONS = ["--id", "--arg", "--env", "--env-value", "--model", "--config", "--run-arg"]
PLAN_OPTIONS += ["--host", "--executor", "--api-key-env", "--capability"]


def run_strict(argv: list[str]) -> tuple[int, bytes, bytes]:
    """`main(argv)` with stdout and stderr that refuse anything but UTF-8, as under a strict
    C.UTF-8 locale or a pipe read by a strict consumer."""
    out, err = io.BytesIO(), io.BytesIO()
    wrap = [io.TextIOWrapper(b, encoding="utf-8", errors="strict") for b in (out, err)]
    with contextlib.redirect_stdout(wrap[0]), contextlib.redirect_stderr(wrap[1]):
        code = main(argv)
        for w in wrap:
            w.flush()
    return code, out.getvalue(), err.getvalue()


@functools.cache
def undecodable_files() -> tuple[str, str]:
    """A tiny model and a config file that exist under names that are not UTF-8 (the drill's
    ``cp M $'m\\xff.gguf'``), so that commands succeed on them and print their paths."""
    d = Path(tempfile.mkdtemp(prefix="exedra-argv-"))
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    model = os.fsdecode(os.fsencode(d) + b"/m\xff\xfe.gguf")
    write_tiny_llama(model)
    config = os.fsdecode(os.fsencode(d) + b"/c\x80.yaml")
    Path(config).write_text("env: {A: b}\nengines: {llama: {args: [--ctx-size, '64']}}\n")
    return model, config


def _argv(command: list[str], extras: list[tuple[str, str]], real: tuple[bool, bool]) -> list[str]:
    model, config = undecodable_files()
    argv = list(command)
    paths = [model if command[0] == "inspect" else config] if any(real) else []
    for opt, value in extras:
        if command[0] == "plan" and opt in PLAN_OPTIONS:
            if opt == "--env":
                value = f"{value}=x"
            elif opt == "--env-value":
                opt, value = "--env", f"A={value}"
            argv.append(f"{opt}={value}")
        elif command[0] in ("inspect", "config") and opt == "path":
            paths.append(value)
    if command[0] in ("inspect", "config"):
        argv += paths[-1:]  # one path: the last one drawn
    if command[0] == "inspect" and len(argv) == len(command):
        argv.append(os.fsdecode(b"/nonexistent/m\xff.gguf"))
    if command[0] == "plan":
        if real[0]:
            argv.append(f"--model={model}")
        if real[1]:
            argv.append(f"--config={config}")
        if not any(a.startswith("--model=") for a in argv):
            argv.append("--model=" + os.fsdecode(b"/m\xfe.gguf"))
    return argv


@given(
    st.sampled_from(COMMANDS),
    st.lists(st.tuples(st.sampled_from(["path", *PLAN_OPTIONS]), raw), max_size=3),
    st.tuples(st.booleans(), st.booleans()),
)
def test_undecodable_argv_never_breaks_output(
    command: list[str], extras: list[tuple[str, str]], real: tuple[bool, bool]
) -> None:
    # `real`: an existing model or config under an undecodable name, given first, so that the
    # drawn options can still override it and most runs reach what a success prints.
    argv = _argv(command, extras, real)
    code, out, err = run_strict(argv)
    event(f"{command[0]} exit {code}")
    assert code in (0, 1, 2), (argv, err)
    out.decode("utf-8")  # both streams are valid UTF-8 whatever argv held
    err.decode("utf-8")
    assert b"Traceback" not in err
    if code == 0 and "--json" in argv:
        json.loads(out)
    if code == 0:
        assert out.strip(), argv
    else:
        assert err.count(b"\n") <= 2, err  # one line (argparse may add its usage line)


# -- every numeric option checked where it is parsed (issue 18, items 5 and 8) ---------------

# (command prefix that fails after parsing without starting anything, option, kind of value)
SECONDS, COUNT, PORT = "seconds", "count", "port"
NUMERIC = [
    (["launch", "--model", "/nonexistent/m.gguf", "--kind", "llama"], "--ready-timeout", SECONDS),
    (["launch", "--model", "/nonexistent/m.gguf", "--kind", "llama"], "--stop-timeout", SECONDS),
    (["launch", "--model", "/nonexistent/m.gguf", "--kind", "llama"], "--ctx", COUNT),
    (["launch", "--model", "/nonexistent/m.gguf", "--kind", "llama"], "--threads", COUNT),
    (["launch", "--model", "/nonexistent/m.gguf", "--kind", "llama"], "--port", PORT),
    (["launch", "--model", "/nonexistent/m.gguf", "--kind", "llama"], "--port-base", PORT),
    (["wait-ready", "ftp://not-http"], "--timeout", SECONDS),
    (["wait-ready", "ftp://not-http"], "--interval", SECONDS),
    (["emit", "/nonexistent/plan.json", "--target", "k8s"], "--stop-timeout", SECONDS),
    # emit's --uid, --gpu-count and --start-budget are checked by their own rules
    # (cli/emit.py's names checks, with their properties).
]


def _valid(kind: str, text: str) -> bool:
    if kind == SECONDS:
        try:
            v = float(text)
        except ValueError:
            return False
        return v > 0 and v not in (float("inf"),) and v == v
    try:
        n = int(text, 10)
    except ValueError:
        return False
    return n >= 0 and (kind != PORT or n <= 65535)


numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**6), max_value=10**6).map(str),
    st.sampled_from(["0", "-0", "0.0", "-5", "nan", "inf", "-inf", "1e309", "65536", " 3", "x"]),
)


@given(st.sampled_from(NUMERIC), numbers)
def test_every_numeric_option_is_checked_where_parsed(
    case: tuple[list[str], str, str], value: str
) -> None:
    prefix, option, kind = case
    code, _, err = cli(*prefix, f"{option}={value}")
    # Every case fails (a missing model, plan or a non-http URL) but after its options are
    # parsed: a bad value is refused by name, a good one goes on to that later failure.
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, (value, err)
    assert (f"argument {option}:" in err) is not _valid(kind, value), (value, err)


# -- every output and input path checked where it is parsed or used (issue 18, items 5, 9, 11) --


@functools.cache
def _path_shapes() -> dict[str, str]:
    """One path of each shape a user may type where a file or directory is expected."""
    d = Path(tempfile.mkdtemp(prefix="exedra-paths-"))
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    (d / "file").write_text("x")
    (d / "dir").mkdir()
    (d / "dir-with-yaml").mkdir()
    (d / "dir-with-yaml" / "m.yaml").mkdir()  # a directory where a file will be written
    return {
        "existing file": str(d / "file"),
        "directory": str(d / "dir"),
        "file in the way": str(d / "dir-with-yaml"),
        "missing": str(d / "missing"),
        "missing parent": str(d / "nope" / "deeper"),
        "under a file": str(d / "file" / "below"),
        "empty": "",
    }


PATH_OPTIONS = [
    (["plan", "--model", "/m.gguf", "--kind", "llama", "--no-config", "--emit", "k8s"], "--out"),
    (["plan", "--model", "/m.gguf", "--kind", "llama"], "--config"),
    (["plan", "--model", "/m.gguf", "--kind", "llama", "--no-config"], "--executor"),
    (["plan", "--model", "/m.gguf", "--kind", "llama", "--no-config"], "--hardware"),
    (["launch", "--model", "/nonexistent/m.gguf", "--kind", "llama"], "--log-file"),
    (["config"], None),
    (["config", "--check"], None),
]


@given(st.sampled_from(PATH_OPTIONS), st.sampled_from(sorted(_path_shapes())))
def test_every_path_option_is_one_line_or_success(
    case: tuple[list[str], str | None], shape: str
) -> None:
    prefix, option = case
    path = _path_shapes()[shape]
    argv = [*prefix, option, path] if option else [*prefix, path]
    if prefix[0] == "plan" and option != "--executor":
        argv += ["--executor", "/usr/bin/true", "--host", "0.0.0.0", "--port", "8080"]
    code, _, err = cli(*argv)
    event(f"{prefix[0]} {option or 'PATH'} {shape}: exit {code}")
    assert "Traceback" not in err, (argv, err)
    assert code in (0, 1, 2), (argv, err)
    # config --check reports a file it refuses as a finding on stdout (an emitted manifest
    # another example wrote into the directory, say); every other failure is one line.
    if code != 0 and err:
        assert err.count("\n") == 1 and err.startswith("exedra-engine"), (argv, err)
    elif code != 0:
        assert argv[:2] == ["config", "--check"], argv
    if shape in ("missing parent", "under a file", "file in the way") and option == "--out":
        assert code == 2
