"""Random valid plans with hostile emit options and model paths, for every target, through the
real validators (issue 22): ``kubernetes-validate --strict``, ``systemd-analyze verify`` with
any output counted as a failure, and Quadlet's own reading of every value (its generator is
not installed here: see tests/emit/test_emit_deploy.py). Whatever is drawn, emit either refuses
with an `EmitError` or writes files that all of them pass; a new class of invalid output is
found here rather than by a cluster.

The validators are slow (a process each), so the example counts are small."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import kubernetes_validate
import msgspec
import pytest
import yaml
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success
from tests.emit.test_emit_deploy import ALL_HOSTS, fake_binary, systemd_verify, with_memory
from tests.emit_cases import hardware

from exedra_engine import Constraints, Kind, LaunchPlan, ModelInfo, ModelSpec, plan_launch
from exedra_engine._core.emit import EmitOptions, Selinux, Storage, Target, emit
from exedra_engine._core.emit.checks import check_files
from exedra_engine._core.emit.formats import ini
from exedra_engine.errors import EmitError

HOSTILE = [
    "",
    "Upper_Case",
    "7b",
    "a b",
    "$HOME",
    "${X}",
    "100%d",
    "new\nline",
    "模型",
    "-lead",
    "x" * 70,
    "/",
    "/srv",
    "0",
    "a:b",
]
PATHS = [
    "/var/lib/exedra/models/qwen/model.gguf",
    "/srv/a/m.gguf",
    "/tmp/m.gguf",
    "/srv/x/dollar$HOME${X}/m.gguf",
    "/srv/with space/m.gguf",
    "/srv/new\nline/m.gguf",
    "/srv/q'uo\"te/m.gguf",
    "/srv/back\\slash/m.gguf",
    "/srv/100%d/m.gguf",
    "/srv/ünï/m.gguf",
    "/srv/split/big-00001-of-00003.gguf",
    "/m.gguf",
]
EXTRA = [
    (),
    ("--mmproj", "/usr/share/mm/p.gguf"),
    ("--model-draft", "/opt/d/d.gguf"),
    ("--prio", "2"),
    ("--mlock",),
    ("--cpu-mask", "0xff"),
    ("--api-prefix", "/llm"),
    ("--threads", "6"),
]


# Each option: values every target accepts, then hostile ones. An example takes valid values,
# and at most one hostile one, so most examples reach the validators.
OPTIONS: dict[str, tuple[list[Any], list[Any]]] = {
    "name": (["", "qwen-b"], HOSTILE),
    "namespace": (["", "llm"], HOSTILE),
    "secret": (["", "keys.qwen"], HOSTILE),
    "claim": (["", "models-a"], HOSTILE),
    "image": (["", "registry.example/x:1@sha256:" + "0" * 64], ["a b", "UP/x"]),
    "models_dir": ([""], ["/", "/srv", "/srv/a"]),
    "storage": (list(Storage), []),
    "models_image": (["registry.example/models:1"], [""]),
    "uid": ([65532, 1000], [0, -1]),
    "gpu_count": ([0, 2], [-2]),
    "gpu_groups": ([(), (110,)], [(0,)]),
    "publish_address": (["127.0.0.1", "", "::1"], ["a b", "1.2.3"]),
    "selinux": (list(Selinux), []),
    "start_budget": ([0, 30], [-1]),
}


@st.composite
def options(draw: st.DrawFn) -> EmitOptions:
    chosen = {k: draw(st.sampled_from(ok)) for k, (ok, _) in OPTIONS.items()}
    hostile = [k for k, (_, bad) in OPTIONS.items() if bad]
    if draw(st.booleans()):
        key = draw(st.sampled_from(hostile))
        chosen[key] = draw(st.sampled_from(OPTIONS[key][1]))
    return EmitOptions(**chosen)


@st.composite
def plans(draw: st.DrawFn) -> tuple[LaunchPlan, str]:
    tree = draw(st.sampled_from(ALL_HOSTS))
    path = draw(st.sampled_from(PATHS))
    spec = ModelSpec(
        id=draw(st.sampled_from(["qwen", "7b-chat", "Qwen 2.5/7B", "___", ""])),
        path=path,
        kind=Kind.LLAMA,
    )
    c = Constraints(
        host=draw(st.sampled_from(["0.0.0.0", "0.0.0.0", "::", "127.0.0.1"])),
        port=draw(st.integers(1, 65535)),
        api_key=draw(st.sampled_from(["", "sk-abc123"])),
        extra_args=draw(st.sampled_from(EXTRA)),
        no_gpu=draw(st.booleans()),
    )
    size = draw(st.sampled_from([0, 4_683_073_184]))
    model = ModelInfo(path=path, size=size, architecture="llama") if size else None
    match plan_launch(spec, hardware(tree), c, model=model):
        case Success(plan):
            total = draw(st.sampled_from([0, 300 * 1024**2, 70 * 1024**3]))
            return (with_memory(plan, total) if total else plan), tree
        case _:
            assume(False)
    raise AssertionError


def _k8s_valid(text: str) -> None:
    for doc in yaml.safe_load_all(text):
        if doc:
            kubernetes_validate.validate(doc, "1.35.0", strict=True)


def _quadlet_valid(text: str) -> None:
    for key, value in ini.read_ini(text).get("Container", []):
        ini.expand_dollars(value)  # a lone $ would be expanded in the generated ExecStart=
        assert key != "Volume" or value.split(":", 1)[0] not in ("/", "/srv", "/usr", "/tmp")


needs_systemd = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)


@needs_systemd
# EXEDRA_EMIT_EXAMPLES raises the count for a soak run.
@settings(
    max_examples=int(os.environ.get("EXEDRA_EMIT_EXAMPLES", "25")),
    suppress_health_check=[HealthCheck.too_slow],
)
@given(drawn=plans(), opts=options(), target=st.sampled_from(list(Target)))
def test_emitted_files_pass_the_real_validators_or_emit_refuses(
    drawn: tuple[LaunchPlan, str], opts: EmitOptions, target: Target
) -> None:
    plan, tree = drawn
    match emit(plan, target, opts, hardware=hardware(tree)):
        case Failure(err):
            assert isinstance(err, EmitError), err
            event(f"refused: {type(err).__name__}")
            return
        case Success(emitted):
            files: dict[str, Any] = emitted.files
    event(f"emitted {target.value}")
    assert check_files(plan, target, files) == []
    (text,) = files.values()
    if target is Target.K8S:
        _k8s_valid(text)
    elif target is Target.QUADLET:
        _quadlet_valid(text)
    else:
        with tempfile.TemporaryDirectory() as d:
            exe = fake_binary(Path(d))
            real = msgspec.structs.replace(plan, command=exe)
            again = emit(real, target, msgspec.structs.replace(opts, waiter=sys.executable),
                         hardware=hardware(tree))  # fmt: skip
            ((name, unit),) = again.unwrap().files.items()
            assert systemd_verify(unit, Path(d), name) == ""
