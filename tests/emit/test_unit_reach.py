"""Units that start: a systemd unit whose executor, waiter or model its DynamicUser= cannot
reach (a 0700 directory on the way, /tmp under PrivateTmp=, a home that ProtectHome= hides) is
refused by `emit` and by `emit --check`, naming the path and the fix."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from exedra_engine import (
    CPU,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    ModelSpec,
    plan_launch,
)
from exedra_engine._core.emit.reach import PathFacts, PathStep, reach_problems, unit_paths
from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._shell.local.path_modes import path_facts
from tests.conftest import cli, outside_tmp

ROOT = Path(__file__).resolve().parents[2]
DIR = stat.S_IFDIR
REG = stat.S_IFREG

UNIT = """[Service]
ExecStart=/opt/x/llama-server --model /srv/m/model.gguf --port 8080
ExecStartPost=/opt/w/exedra-engine wait-ready http://127.0.0.1:8080/health
DynamicUser=yes
ProtectHome={home}
"""


def _facts(role: str, path: str, *modes: tuple[str, int]) -> PathFacts:
    return PathFacts(
        role=role,  # type: ignore[arg-type]
        path=path,
        real=path,
        steps=tuple(PathStep(path=p, mode=m) for p, m in modes),
    )


def test_the_unit_names_its_executor_waiter_and_model() -> None:
    got = unit_paths(UNIT.format(home="yes"), LLAMA)
    assert got == [
        ("executor", "/opt/x/llama-server"),
        ("model", "/srv/m/model.gguf"),
        ("waiter", "/opt/w/exedra-engine"),
    ]


def test_a_closed_directory_on_the_way_is_refused_with_the_fix() -> None:
    exe = "/srv/u/.cache/bin/llama-server"
    facts = _facts(
        "executor",
        exe,
        ("/", DIR | 0o755),
        ("/srv", DIR | 0o755),
        ("/srv/u", DIR | 0o700),
        ("/srv/u/.cache", DIR | 0o755),
        ("/srv/u/.cache/bin", DIR | 0o755),
        (exe, REG | 0o755),
    )
    (problem,) = reach_problems(UNIT.format(home="yes"), [facts])
    assert problem.startswith(f"the executor (ExecStart=) {exe}: DynamicUser= cannot enter ")
    assert "/srv/u (mode 0700: closed to other users)" in problem
    assert "/usr/local/lib/exedra-engine" in problem and "--executor PATH" in problem


@pytest.mark.parametrize(
    ("role", "mode", "verb"),
    [("model", 0o600, "read"), ("executor", 0o750, "run"), ("waiter", 0o744, "run")],
)
def test_a_file_closed_to_other_users_is_refused(role: str, mode: int, verb: str) -> None:
    facts = _facts(
        role, "/srv/f", ("/", DIR | 0o755), ("/srv", DIR | 0o755), ("/srv/f", REG | mode)
    )
    (problem,) = reach_problems(UNIT.format(home="yes"), [facts])
    assert f"DynamicUser= cannot {verb} it (mode {mode:04o}" in problem


def test_tmp_and_hidden_homes_are_refused_whatever_the_modes() -> None:
    open_ = (("/", DIR | 0o755), ("/x", DIR | 0o755), ("/x/f", REG | 0o755))
    tmp = _facts("waiter", "/tmp/venv/bin/exedra-engine", *open_)
    home = _facts("executor", "/root/.cache/llama-server", *open_)
    problems = reach_problems(UNIT.format(home="yes"), [tmp, home])
    assert "it is under a /tmp that PrivateTmp= makes private to the unit" in problems[0]
    assert "--waiter PATH" in problems[0]
    assert "it is under /root/, which ProtectHome=yes hides" in problems[1]
    # ProtectHome=read-only (a model under a home) shows the homes: the modes decide then
    assert reach_problems(UNIT.format(home="read-only"), [home]) == []


def test_a_link_is_judged_by_its_target_too() -> None:
    f = PathFacts(
        role="executor",
        path="/usr/local/bin/llama-server",
        real="/root/.cache/b/llama-server",
        steps=(PathStep(path="/", mode=DIR | 0o755),),
    )
    (problem,) = reach_problems(UNIT.format(home="yes"), [f])
    assert "its target /root/.cache/b/llama-server is under /root/" in problem


def test_what_is_not_here_or_runs_as_a_fixed_user_is_not_judged() -> None:
    absent = PathFacts(role="executor", path="/root/x/llama-server")
    assert reach_problems(UNIT.format(home="yes"), [absent]) == []
    closed = _facts("model", "/srv/m", ("/", DIR | 0o755), ("/srv", DIR | 0o700), ("/srv/m", REG))
    fixed = "[Service]\nUser=llama\n"
    assert reach_problems(fixed, [closed]) == []


@pytest.fixture
def tree() -> Iterator[Path]:
    """A directory outside /tmp (which the unit hides anyway), removed afterwards."""
    d = outside_tmp(f"reach-{os.getpid()}")
    d.mkdir(parents=True)
    try:
        yield d
    finally:
        for p in d.rglob("*"):
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
        shutil.rmtree(d)


def test_path_facts_stat_each_directory_and_follow_links(tree: Path) -> None:
    closed = tree / "closed"
    (closed / "bin").mkdir(parents=True)
    exe = closed / "bin" / "llama-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    link = tree / "llama-server"
    link.symlink_to(exe)
    closed.chmod(0o700)
    f = path_facts("executor", str(link))
    assert f.real == str(exe)
    modes = {s.path: stat.S_IMODE(s.mode) for s in f.steps}
    assert modes[str(closed)] == 0o700
    assert f.steps[-1].path == str(exe) and stat.S_ISREG(f.steps[-1].mode)
    assert f.steps[0].path == "/"
    assert path_facts("executor", str(tree / "absent")).steps == ()


def test_emit_refuses_a_unit_whose_executor_is_behind_a_closed_directory(
    tree: Path, tmp_path: Path
) -> None:
    closed = tree / "home-like"
    closed.mkdir()
    exe = closed / "llama-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    model = tree / "model.gguf"
    model.write_bytes(b"GGUF")
    closed.chmod(0o700)
    waiter = tree / "exedra-engine"
    waiter.write_text("#!/bin/sh\n")
    waiter.chmod(0o755)
    hw = Hardware(cpu=CPU(threads=2), executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(exe)),))
    spec = ModelSpec(id="qwen", path=str(model), kind=Kind.LLAMA)
    plan = plan_launch(spec, hw, Constraints(port=8080)).unwrap()
    saved = tmp_path / "plan.json"
    saved.write_bytes(msgspec.json.encode(plan))
    r = cli("emit", str(saved), "--target", "systemd", "--waiter", str(waiter))
    assert r.returncode == 2 and r.stdout == ""
    assert f"the executor (ExecStart=) {exe}: DynamicUser= cannot enter {closed} (mode 0700" in (
        r.stderr
    )
    assert "--executor PATH" in r.stderr
    # --check lists it as a problem of the unit (exit 1)
    r = cli("emit", str(saved), "--target", "systemd", "--waiter", str(waiter), "--check")
    assert r.returncode == 1 and f"check: the executor (ExecStart=) {exe}" in r.stderr
    # opened to other users, the same unit is emitted
    closed.chmod(0o711)
    r = cli("emit", str(saved), "--target", "systemd", "--waiter", str(waiter))
    assert r.returncode == 0, r.stderr
    assert f"ExecStart={exe} " in r.stdout


def test_a_quadlet_container_user_must_read_the_model() -> None:
    from exedra_engine._core.emit.reach import container_reach_problems

    closed = _facts(
        "model",
        "/srv/u/m.gguf",
        ("/", DIR | 0o755),
        ("/srv/u", DIR | 0o750),
        ("/srv/u/m.gguf", REG | 0o644),
    )
    (problem,) = container_reach_problems([closed], "65532")
    assert "User=65532 cannot enter /srv/u (mode 0750" in problem
    opened = _facts("model", "/srv/m.gguf", ("/", DIR | 0o755), ("/srv/m.gguf", REG | 0o644))
    assert container_reach_problems([opened], "65532") == []


def test_emit_quadlet_refuses_a_model_its_container_user_cannot_read(
    tree: Path, tmp_path: Path
) -> None:
    closed = tree / "private"
    closed.mkdir()
    model = closed / "model.gguf"
    model.write_bytes(b"GGUF")
    closed.chmod(0o700)
    hw = Hardware(
        cpu=CPU(threads=2),
        executors=(ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server"),),
    )
    spec = ModelSpec(id="qwen", path=str(model), kind=Kind.LLAMA)
    plan = plan_launch(spec, hw, Constraints(port=8080, host="0.0.0.0")).unwrap()
    saved = tmp_path / "plan.json"
    saved.write_bytes(msgspec.json.encode(plan))
    r = cli("emit", str(saved), "--target", "quadlet")
    assert r.returncode == 2, r.stdout
    assert f"the model file {model}: User=65532 cannot enter {closed} (mode 0700" in r.stderr
    closed.chmod(0o755)
    r = cli("emit", str(saved), "--target", "quadlet")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("systemd", "the model file {model}: DynamicUser= cannot enter {closed} (mode 0700"),
        ("quadlet", "the model file {model}: User=65532 cannot enter {closed} (mode 0700"),
    ],
)
def test_plan_group_emit_refuses_a_member_whose_unit_cannot_reach_its_model(
    tree: Path, tmp_path: Path, target: str, said: str
) -> None:
    from exedra_engine.testing import write_tiny_llama

    exe = tree / "llama-server"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    open_model, closed = tree / "open.gguf", tree / "private"
    closed.mkdir()
    write_tiny_llama(open_model)
    write_tiny_llama(closed / "m.gguf")
    group = tmp_path / "group.yaml"
    group.write_text(
        f"members:\n  - {{id: a, model: {open_model}}}\n  - {{id: b, model: {closed / 'm.gguf'}}}\n"
    )
    hw = tmp_path / "hw.json"
    llama = ExecutorInfo(kind=Kind.LLAMA, path=str(exe))
    hw.write_bytes(msgspec.json.encode(Hardware(cpu=CPU(threads=2), executors=(llama,))))
    argv = ["plan", "--group", str(group), "--hardware", str(hw), "--no-config"]
    argv += ["--no-port-check", "--emit", target, "--waiter", "/usr/bin/exedra-engine-absent"]
    closed.chmod(0o700)
    r = cli(*argv)
    assert r.returncode == 2 and r.stdout == "", r.stderr
    problem = said.format(model=closed / "m.gguf", closed=closed)
    assert f"error: member b: {problem}" in r.stderr
    assert "member a:" not in r.stderr
    closed.chmod(0o755)  # opened to other users, every member's files are emitted
    r = cli(*argv)
    assert r.returncode == 0, r.stderr
