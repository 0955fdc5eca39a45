"""A group member's CPUs and threads are its share's: a layer that would set them (its args,
its env, the group's --arg/--env, its run_args, an override file's env or section), as a flag
or as the variable the executor reads for it, is refused naming the member, the layer and the
flag, by the library and by every command that plans a group (its text, its --json, its
systemd and Kubernetes units), nothing written. What changes neither (``--cpu-strict``,
``--threads-http``), a member's ``threads:`` and a lone member's own flags stand; and then
the share, the argv, ``CPUAffinity=`` and the pod's CPU request agree."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import yaml
from returns.result import Failure

from exedra_engine import (
    Config,
    Constraints,
    GroupMember,
    Kind,
    ModelSpec,
    Override,
    PlanError,
    plan_group,
)
from exedra_engine._core.emit.formats.ini import read_ini, setting
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.group.cpus import cpu_keys
from exedra_engine._core.group.values import GroupPlan
from exedra_engine.testing import write_tiny_llama
from tests.conftest import cli, outside_tmp
from tests.group.test_group_plan import hw_with, member

ADVICE = "give the member threads: in the group file instead (weight: gives it more CPUs)"


def _refusal(members: list[GroupMember], c: Constraints | None = None) -> str:
    r = plan_group(members, hw_with(threads=2), c or Constraints())
    assert isinstance(r, Failure), r
    assert isinstance(r.failure(), PlanError), r
    return str(r.failure())


def _run_args(mid: str, *args: str) -> GroupMember:
    spec = ModelSpec(id=mid, path=f"/m/{mid}.gguf", kind=Kind.LLAMA, run_args=args)
    return GroupMember(spec=spec)


# (the members, the group's constraints, the words the refusal starts with)
ROUTES = {
    "member args": (
        [member("a"), member("b", extra_args=("--cpu-range", "0-1", "-t", "64"))],
        Constraints(),
        "member b: --cpu-range in its args would set",
    ),
    "member env": (
        [member("a"), member("b", extra_env=("LLAMA_ARG_THREADS=64",))],
        Constraints(),
        "member b: LLAMA_ARG_THREADS (--threads) in its env would set",
    ),
    "group-wide arg": (
        [member("a"), member("b")],
        Constraints(extra_args=("-t", "64")),
        "member a: -t (--threads) in the group's args (--arg) would set",
    ),
    "group-wide env": (
        [member("a"), member("b")],
        Constraints(extra_env=("LLAMA_ARG_THREADS=64",)),
        "member a: LLAMA_ARG_THREADS (--threads) in the group's env (--env) would set",
    ),
    "override file's engine section": (
        [member("a"), member("b")],
        Constraints(overrides=Config(engines={"llama": Override(args=("--cpu-mask", "0x3"))})),
        "member a: --cpu-mask in the override files' engines.llama section would set",
    ),
    "override file's model section": (
        [member("a"), member("b")],
        Constraints(overrides=Config(models={"b": Override(env={"LLAMA_ARG_THREADS": "64"})})),
        "member b: LLAMA_ARG_THREADS (--threads) in the override files' models.b section",
    ),
    "override file's env": (
        [member("a"), member("b")],
        Constraints(overrides=Config(env={"LLAMA_ARG_THREADS": "64"})),
        "member a: LLAMA_ARG_THREADS (--threads) in the override files' env would set",
    ),
    "run_args": (
        [member("a"), _run_args("b", "--cpu-mask", "0x3")],
        Constraints(),
        "member b: --cpu-mask in its run_args would set",
    ),
}


@pytest.mark.parametrize("route", ROUTES)
def test_every_layer_that_sets_a_members_cpus_or_threads_is_refused_naming_it(
    route: str,
) -> None:
    members, c, words = ROUTES[route]
    said = _refusal(members, c)
    assert said.startswith(words), said
    assert "would set what the group decides for each member, its CPUs and threads" in said
    assert said.endswith(ADVICE)
    assert ("--no-config" in said) == ("override" in route)  # a way round an admin's file


@pytest.mark.parametrize(
    "args",
    [
        ("-t", "8"),
        ("--threads=8",),
        ("-tb", "8"),
        ("-Cr", "0-1"),
        ("-C", "0x3"),
        ("-Crb", "0-1"),
        ("-Cb", "0x3"),
        ("-td", "8"),
        ("-tbd", "8"),
        ("-Crd", "0-1"),
        ("-Cd", "0x3"),
        ("-Cbd", "0x3"),
        ("--numa", "isolate"),
    ],
)
def test_each_flag_that_sets_llama_servers_threads_or_cpus_is_refused(
    args: tuple[str, ...],
) -> None:
    said = _refusal([member("a"), member("b", extra_args=args)])
    assert said.startswith(f"member b: {args[0].partition('=')[0]}"), said


def test_the_variable_of_numa_placement_is_refused_too() -> None:
    said = _refusal([member("a"), member("b", extra_env=("LLAMA_ARG_NUMA=isolate",))])
    assert said.startswith("member b: LLAMA_ARG_NUMA (--numa) in its env"), said


@pytest.mark.parametrize("args", [("-t", "8"), ("-p", "4")])
def test_whisper_servers_threads_and_processors_are_refused(args: tuple[str, ...]) -> None:
    asr = member("asr", Kind.TRANSCRIBE, extra_args=args)
    said = _refusal([member("a"), asr])
    assert said.startswith(f"member asr: {args[0]} (--") and "in its args" in said, said


def test_what_changes_neither_cpus_nor_threads_stands_and_the_share_is_pinned() -> None:
    b = member("b", extra_args=("--cpu-strict", "0", "--threads-http", "8"))
    g = plan_group([member("a"), b], hw_with(threads=4)).unwrap()
    share, args = g.shares[1], g.plan_of("b").args
    assert (share.cpus, share.threads) == ((2, 3), 2)
    assert args[args.index("--cpu-range") + 1] == "2-3"
    assert args[args.index("--threads") + 1] == "2"
    assert args[args.index("--cpu-strict") + 1] == "0"  # the member's own strictness


def test_a_lone_member_has_no_share_and_keeps_its_own_threads() -> None:
    g = plan_group([member("a", extra_args=("-t", "64"))], hw_with(threads=2)).unwrap()
    assert (g.shares[0].cpus, g.shares[0].threads) == ((), 0)
    assert "64" in g.plan_of("a").args and "--cpu-range" not in g.plan_of("a").args


# The command line: one line naming the member, the layer and the flag, nothing written.

PLAN = ("--no-port-check",)


@pytest.fixture
def models() -> Iterator[Path]:
    """A tiny llama where a systemd unit's user can reach it."""
    d = outside_tmp(f"member-cpus-{os.getpid()}")
    d.mkdir(parents=True)
    d.chmod(0o755)
    write_tiny_llama(d / "a.gguf")
    yield d
    shutil.rmtree(d)


@pytest.fixture
def hardware(tmp_path: Path) -> str:
    """A host of 4 CPUs (paths only: nothing is run)."""
    f = tmp_path / "hw.json"
    llama = {"kind": "llama", "path": "/usr/bin/llama-server", "backends": ["cpu"]}
    cpu = {"threads": 4, "ram": 8 << 30, "available": 6 << 30}
    f.write_text(json.dumps({"cpu": cpu, "gpus": [], "executors": [llama]}))
    return str(f)


def _group(tmp_path: Path, models: Path, b_extra: str = "") -> str:
    f = tmp_path / "group.yaml"
    model = models / "a.gguf"
    f.write_text(
        "members:\n"
        f"  - {{id: a, model: {model}, ctx: 256}}\n"
        f"  - {{id: b, model: {model}, ctx: 256{b_extra}}}\n"
    )
    return str(f)


def _config(tmp_path: Path) -> str:
    f = tmp_path / "overrides.yaml"
    f.write_text("engines:\n  llama:\n    args: [--cpu-mask, '0x3']\n")
    return str(f)


CLI_ROUTES = {
    "member args": (
        ', args: [--cpu-range, "0-1", -t, "64"]',
        ("--no-config",),
        "member b: --cpu-range in its args",
    ),
    "member env": (
        ", env: {LLAMA_ARG_THREADS: '64'}",
        ("--no-config",),
        "member b: LLAMA_ARG_THREADS (--threads) in its env",
    ),
    "group-wide arg": (
        "",
        ("--no-config", "--arg=-t", "--arg=64"),
        "member a: -t (--threads) in the group's args (--arg)",
    ),
    "group-wide env": (
        "",
        ("--no-config", "--env", "LLAMA_ARG_THREADS=64"),
        "member a: LLAMA_ARG_THREADS (--threads) in the group's env (--env)",
    ),
    "override file": (
        "",
        ("--config", "CONFIG"),
        "member a: --cpu-mask in the override files' engines.llama section",
    ),
}
OUTPUTS = {
    "text": (),
    "json": ("--json",),
    "systemd": ("--emit", "systemd"),
    "k8s": ("--emit", "k8s", "--host", "0.0.0.0"),
}


@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("route", CLI_ROUTES)
def test_plan_group_refuses_a_members_own_cpus_in_every_output_and_writes_nothing(
    tmp_path: Path, models: Path, hardware: str, route: str, output: str
) -> None:
    b_extra, more, words = CLI_ROUTES[route]
    more = tuple(_config(tmp_path) if a == "CONFIG" else a for a in more)
    out = tmp_path / "out"
    emitting = OUTPUTS[output][:1] == ("--emit",)
    written = ("--out", str(out)) if emitting else ()
    group = _group(tmp_path, models, b_extra)
    r = cli(
        "plan", "--group", group, "--hardware", hardware, *PLAN, *more, *OUTPUTS[output], *written
    )
    assert r.code == 2, r.err
    assert r.out == ""
    assert r.err.startswith(f"exedra-engine: error: {words} would set what the group decides")
    assert r.err.count("\n") == 1 and "Traceback" not in r.err
    assert not out.exists() or list(out.iterdir()) == []


def test_a_members_threads_field_is_its_share_in_the_text_the_json_and_the_units(
    tmp_path: Path, models: Path, hardware: str
) -> None:
    # threads: is the way to give a member more threads; what changes neither stands.
    group = _group(tmp_path, models, ', threads: 3, args: [--cpu-strict, "0", --threads-http, "8"]')
    argv = ("plan", "--group", group, "--hardware", hardware, "--no-config", *PLAN)
    r = cli(*argv)
    assert r.code == 0, r.err
    assert "share     port 18081, memory" in r.out and "CPUs 2-3, 3 threads" in r.out
    assert "note      b: its own 3 threads run on 2 CPUs (2-3)" in r.out
    r = cli(*argv, "--json")
    assert r.code == 0, r.err
    g = msgspec.json.decode(r.out, type=GroupPlan)
    shares = {s.id: (s.cpus, s.threads) for s in g.shares}
    assert shares == {"a": ((0, 1), 2), "b": ((2, 3), 3)}
    for mid, (cpus, threads) in shares.items():
        args = g.plan_of(mid).args
        assert args[args.index("--threads") + 1] == str(threads)
        assert args[args.index("--cpu-range") + 1] == f"{cpus[0]}-{cpus[-1]}"
    units = tmp_path / "units"
    # The waiter another host has (a checkout under /tmp, as a CI clone may be, has none a
    # unit could run: PrivateTmp=).
    waiter = ("--waiter", "/usr/local/lib/exedra-engine/bin/exedra-engine")
    r = cli(*argv, "--emit", "systemd", "--name", "pair", "--out", str(units), *waiter)
    assert r.code == 0, r.err
    for mid, (cpus, _) in shares.items():
        unit = read_ini((units / f"pair-{mid}.service").read_text())
        assert setting(unit, "Service", "CPUAffinity") == [f"{cpus[0]}-{cpus[-1]}"]
    r = cli(*argv, "--emit", "k8s", "--host", "0.0.0.0", "--name", "pair")
    assert r.code == 0, r.err
    docs = [d for d in yaml.safe_load_all(r.out) if d and d["kind"] == "Deployment"]
    for d in docs:
        mid = d["metadata"]["name"].removeprefix("pair-")
        c = d["spec"]["template"]["spec"]["containers"][0]
        assert c["resources"]["requests"]["cpu"] == str(shares[mid][1])


def test_every_cpu_flag_a_profile_names_is_one_its_flag_table_knows() -> None:
    # A name the table does not know would be dropped from the keys refused, silently.
    for p in BUILTIN:
        named = {p.threads_flag, p.threads_batch_flag, p.cpu_range_flag, p.cpu_mask_flag}
        for name in (*p.cpu_flags, *(n for n in named if n)):
            assert p.flags.lookup(name) is not None, (p.binary, name)
        assert len(cpu_keys(p)) == len(p.cpu_flags) + len(named - {""})
