"""Executor profiles: all executor knowledge in one place, and a third executor added from
test code alone (shaped like stable-diffusion.cpp's ``sd-server``)."""

from __future__ import annotations

import ast
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import trio
from returns.result import Failure

from exedra_engine import (
    BUILTIN_EXECUTORS,
    CPU,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    ModelSpec,
    config_from_yaml,
    explain_launch,
    open_instance,
    parse_kind,
    plan_launch,
    supported_kinds,
)
from exedra_engine._core.executors.builtin import executor_profile
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._shell.local.host import LocalHost
from exedra_engine._shell.probe import probe
from exedra_engine.cli import main
from exedra_engine.testing import free_port
from tests.conftest import FAKE

SRC = Path(__file__).resolve().parents[2] / "src" / "exedra_engine"
PROFILE_FILES = {"_core/executors/builtin.py", "_core/executors/_flagdata.py"}
# What only a profile may know: binary names, the variables and flags of one executor.
LITERALS = re.compile(r"llama-server|whisper-server|LLAMA_API_KEY|LLAMA_ARG_|--api-key(?![-\w])")


def _code_strings(tree: ast.AST) -> Iterator[ast.Constant]:
    # Docstrings, attribute docstrings included, are bare string statements: prose, not code.
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            yield node


def _library_modules() -> Iterator[tuple[str, ast.AST]]:
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel not in PROFILE_FILES and not rel.startswith("testing/"):
            yield rel, ast.parse(path.read_text(), rel)


def test_no_kind_branch_outside_the_profiles() -> None:
    found = []
    for rel, tree in _library_modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(
                isinstance(c, ast.Attribute)
                and isinstance(c.value, ast.Name)
                and c.value.id == "Kind"
                and c.attr.isupper()
                for c in (node.left, *node.comparators)
            ):
                found.append(f"{rel}:{node.lineno}")
    assert found == []


def test_no_executor_literal_outside_the_profiles() -> None:
    found = [
        f"{rel}:{s.lineno}: {s.value!r}"
        for rel, tree in _library_modules()
        for s in _code_strings(tree)
        if LITERALS.search(s.value)
    ]
    assert found == []


def test_the_literal_check_sees_a_literal_in_code_but_not_in_a_docstring() -> None:
    tree = ast.parse('"""about llama-server"""\nX = "LLAMA_API_KEY"\n')
    assert [s.value for s in _code_strings(tree)] == ["LLAMA_API_KEY"]


# -- a third executor, added from here: a value passed in, nothing registered -----------------

SD_ROWS = (
    (("-h", "--help"), (), 0, ()),
    (("-l", "--listen-ip"), (), 1, ()),
    (("--listen-port",), (), 1, ("SD_PORT",)),
    (("-m", "--model"), (), 1, ()),
    (("-t", "--threads"), (), 1, ()),
    (("--steps",), (), 1, ()),
    (("--vae-on-cpu",), (), 0, ()),
    (("--lora-model-dir",), (), 1, ()),
)

SD = ExecutorProfile(
    kind="sd",
    binary="sd-server",
    flag_rows=SD_ROWS,
    host_flag="--listen-ip",
    port_flag="--listen-port",
    port_env="SD_PORT",
    ready_path="/health",
    cpu_only_args=("--vae-on-cpu",),
    capabilities={"image": ()},
    architectures=frozenset({"sd"}),
)
WITH_SD = BUILTIN_EXECUTORS.with_(SD)


def _hw(kind: str, path: str) -> Hardware:
    return Hardware(cpu=CPU(threads=2), executors=(ExecutorInfo(kind=kind, path=path),))


def test_an_added_kind_is_a_kind_where_its_executors_are_given() -> None:
    assert WITH_SD.kinds == ("llama", "transcribe", "sd")
    assert WITH_SD.kind_of("sd") == "sd" and WITH_SD.kind_of("llama") is Kind.LLAMA
    assert WITH_SD.profile("sd") is SD
    spec = msgspec.json.decode(b'{"path": "m", "kind": "sd"}', type=ModelSpec)
    assert spec.kind == "sd"
    cfg = config_from_yaml(
        "engines: {sd: {args: [--steps, '4']}}\n", "c.yaml", executors=WITH_SD
    ).unwrap()
    assert cfg.engines["sd"].args == ("--steps", "4")
    # The built-in set does not know it: the same file is refused, naming the known kinds.
    r = config_from_yaml("engines: {sd: {args: [--steps, '4']}}\n", "c.yaml")
    assert isinstance(r, Failure) and "known: llama, transcribe" in str(r.failure())
    assert parse_kind("sd").failure() is not None  # `Kind` stays the two built-in members


def test_it_plans_from_its_own_profile() -> None:
    spec = ModelSpec(id="flux", path="/m/flux.gguf", kind="sd", capabilities=("image",))
    c = Constraints(threads=2, port=7860, extra_args=("--steps", "8"))
    plan = plan_launch(spec, _hw("sd", "/opt/sd/sd-server"), c, executors=WITH_SD).unwrap()
    assert plan.args == (
        "--model",
        "/m/flux.gguf",
        "--listen-ip",
        "127.0.0.1",
        "--listen-port",
        "7860",
        "--threads",
        "2",
        "--vae-on-cpu",
        "--steps",
        "8",
    )
    assert (plan.host, plan.port, plan.ready, plan.api_key) == ("127.0.0.1", 7860, "/health", "")
    # Its port variable is read as its profile says: a higher layer's SD_PORT moves it.
    c = Constraints(extra_env=("SD_PORT=7000",))
    moved = plan_launch(spec, _hw("sd", "x"), c, executors=WITH_SD).unwrap()
    assert moved.port == 7000 and "--listen-port" not in moved.args


def test_it_refuses_what_its_profile_lacks() -> None:
    spec = ModelSpec(path="/m/flux.gguf", kind="sd")
    for c, needle in (
        (Constraints(api_key="k"), "sd-server has no API key option"),
        (Constraints(ctx=4096), "sd-server has no context-size option"),
        (Constraints(extra_args=("--api-key", "k")), "sd-server has no API key option"),
    ):
        r = plan_launch(spec, _hw("sd", "x"), c, executors=WITH_SD)
        assert isinstance(r, Failure) and needle in str(r.failure())
    llm = msgspec.structs.replace(spec, capabilities=("llm",))
    r = plan_launch(llm, _hw("sd", "x"), executors=WITH_SD)
    assert isinstance(r, Failure) and "serves: image" in str(r.failure())


def test_it_explains() -> None:
    spec = ModelSpec(path="/m/flux.gguf", kind="sd")
    c = Constraints(extra_args=("--listen-port", "9000"))
    e = explain_launch(spec, _hw("sd", "x"), c, executors=WITH_SD)
    sources = {s.text: s for s in e.unwrap().sources}
    assert sources["--listen-port 9000"].layer == "caller"
    assert sources["--listen-port 9000"].overrode == ("engine: --listen-port 18080",)


def test_the_cli_plans_it(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "/m/flux.gguf", "--kind", "sd", "--executor", str(FAKE)]
    assert main([*argv, "--no-port-check", "--json"], executors=WITH_SD) == 0
    out = msgspec.json.decode(capsys.readouterr().out)
    assert out["spec"]["kind"] == "sd" and "--listen-port" in out["args"]
    # Without it, the command line does not know the kind.
    assert main([*argv, "--no-port-check", "--json"]) == 2
    assert "--kind: choose from llama, transcribe" in capsys.readouterr().err


def test_probe_finds_it_on_path(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "sd-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    hw = probe(LocalHost(path_env=str(bin_dir)), executors=WITH_SD).unwrap()
    found = hw.executor("sd")
    assert found is not None and found.path == str(exe)
    assert probe(LocalHost(path_env=str(bin_dir))).unwrap().executor("sd") is None


async def test_it_launches_and_stops() -> None:
    spec = ModelSpec(path="/m/flux.gguf", kind="sd")
    c = Constraints(port=free_port())  # its own: a fixed port may be another's ephemeral one
    plan = plan_launch(spec, _hw("sd", str(FAKE)), c, executors=WITH_SD).unwrap()
    with trio.fail_after(30):
        async with open_instance(plan, executors=WITH_SD) as inst:
            assert inst.endpoint.url == f"http://127.0.0.1:{plan.port}"
            pid = inst.pid
        assert inst.exit_reason is not None and inst.exit_reason.clean
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_built_in_profiles_are_the_default() -> None:
    assert executor_profile(Kind.LLAMA).binary == "llama-server"
    assert BUILTIN_EXECUTORS.kinds == tuple(supported_kinds())
