"""plan(): the shell that reads the model header and the ports in use."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from returns.result import Failure

from exedra_engine import (
    CPU,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    ModelSpec,
    NotGGUF,
    PlanError,
    PortInUse,
    plan,
)
from exedra_engine._shell.plan import PlanRequest, explain_request
from exedra_engine.errors import NoHardware

HW = Hardware(
    cpu=CPU(threads=2),
    executors=(
        ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server"),
        ExecutorInfo(kind=Kind.TRANSCRIBE, path="/usr/bin/whisper-server"),
    ),
)


def test_the_header_is_read_when_the_model_exists(tiny_llama: Path) -> None:
    p = plan(ModelSpec(path=str(tiny_llama), kind=Kind.LLAMA), HW).unwrap()
    assert p.model is not None and p.model.blocks == 2


def test_an_absent_model_plans_without_a_header(tmp_path: Path) -> None:
    p = plan(ModelSpec(path=str(tmp_path / "later.gguf"), kind=Kind.LLAMA), HW).unwrap()
    assert p.model is None


def test_a_non_gguf_file_for_llama_is_an_error_before_anything_starts(tmp_path: Path) -> None:
    f = tmp_path / "weights.safetensors"
    f.write_bytes(b"{}" * 50)
    r = plan(ModelSpec(path=str(f), kind=Kind.LLAMA), HW)
    assert isinstance(r, Failure) and isinstance(r.failure(), NotGGUF)
    assert str(f) in str(r.failure())


def test_a_whisper_ggml_model_is_not_read_as_gguf(tiny_whisper: Path) -> None:
    p = plan(ModelSpec(path=str(tiny_whisper), kind=Kind.TRANSCRIBE), HW).unwrap()
    assert p.model is None


def test_a_llama_gguf_planned_for_whisper_is_refused(tiny_llama: Path) -> None:
    r = plan(ModelSpec(path=str(tiny_llama), kind=Kind.TRANSCRIBE), HW)
    assert isinstance(r, Failure) and isinstance(r.failure(), PlanError)


def test_ports_in_use_here_are_skipped_or_refused(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        spec = ModelSpec(path=str(tmp_path / "m.gguf"), kind=Kind.LLAMA)
        scanned = plan(spec, HW, Constraints(port_base=taken)).unwrap()
        assert scanned.port > taken and scanned.port_scanned
        r = plan(spec, HW, Constraints(port=taken))
        assert isinstance(r, Failure) and isinstance(r.failure(), PortInUse)


def test_side_models_are_found_by_the_one_reader(tmp_path: Path) -> None:
    from exedra_engine._shell.local.host import LocalHost
    from exedra_engine._shell.plan import side_inventories
    from exedra_engine.testing import write_arch_model

    side = str(write_arch_model(tmp_path / "mmproj.gguf", "llama"))
    spec = ModelSpec(path=str(tmp_path / "m.gguf"), kind=Kind.LLAMA)
    for args in (("--mmproj", side), (f"--mmproj={side}",), ("-mm", side)):
        found = side_inventories(spec, Constraints(extra_args=args), LocalHost())
        assert [inv.paths[0] for inv in found] == [side], args
    # As the executor reads it, "--mmproj" here is the alias's value, not a flag.
    alias = ("--alias", "--mmproj", side)
    assert side_inventories(spec, Constraints(extra_args=alias), LocalHost()) == ()


def test_side_models_are_read_from_the_plans_own_override_sections_only(tmp_path: Path) -> None:
    from exedra_engine import Config, Override
    from exedra_engine._shell.local.host import LocalHost
    from exedra_engine._shell.plan import side_inventories
    from exedra_engine.testing import write_arch_model

    mine = str(write_arch_model(tmp_path / "mine.gguf", "llama"))
    theirs = str(write_arch_model(tmp_path / "theirs.gguf", "llama"))
    spec = ModelSpec(id="a", path=str(tmp_path / "m.gguf"), kind=Kind.LLAMA)
    cfg = Config(
        models={"a": Override(args=("--mmproj", mine)), "b": Override(args=("--mmproj", theirs))},
        engines={Kind.TRANSCRIBE: Override(args=("--model-draft", theirs))},
    )
    found = side_inventories(spec, Constraints(overrides=cfg), LocalHost())
    assert [inv.paths[0] for inv in found] == [mine]


def test_plan_request_is_a_value() -> None:
    spec = ModelSpec(id="m", path="/var/lib/exedra/models/qwen/model.gguf", kind=Kind.LLAMA)
    req = PlanRequest(spec=spec, hardware=None)
    assert req == PlanRequest(spec=spec, hardware=None, constraints=Constraints())
    with pytest.raises(AttributeError):
        req.spec = spec  # type: ignore[misc]
    with pytest.raises(NoHardware):
        explain_request(req)
