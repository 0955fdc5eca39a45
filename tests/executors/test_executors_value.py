"""Issue 20 item 4: executors are an immutable value passed in, `Kind` is never patched, and
profiles are hashable. A third executor (shaped like stable-diffusion.cpp's ``sd-server``)
exists only in the `Executors` value that holds it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import msgspec
import pytest
from returns.result import Failure

from exedra_engine import (
    BUILTIN_EXECUTORS,
    CPU,
    Constraints,
    ExecutorInfo,
    ExecutorProfile,
    Executors,
    Hardware,
    Kind,
    ModelSpec,
    UnsupportedKind,
    config_from_yaml,
    plan_launch,
)
from exedra_engine._core.emit import EmitOptions, Target, emit
from exedra_engine._core.executors.builtin import LLAMA, WHISPER
from exedra_engine._core.executors.profile import _flag_table
from exedra_engine._core.host.hardware_file import hardware_from_json
from exedra_engine._core.plan.explained import redact_plan
from exedra_engine._core.secrets import REDACTED
from exedra_engine._core.struct import FrozenDict
from exedra_engine.cli import main
from exedra_engine.errors import ConfigError, HardwareFileError
from tests.conftest import FAKE

SD = ExecutorProfile(
    kind="sd",
    binary="sd-server",
    flag_rows=(
        (("-l", "--listen-ip"), (), 1, ()),
        (("--listen-port",), (), 1, ("SD_PORT",)),
        (("-m", "--model"), (), 1, ()),
        (("-t", "--threads"), (), 1, ()),
        (("--token",), (), 1, ()),
        (("--vae-on-cpu",), (), 0, ()),
    ),
    host_flag="--listen-ip",
    port_flag="--listen-port",
    secret_flags=frozenset({"--token"}),
    cpu_only_args=("--vae-on-cpu",),
    capabilities={"image": ()},
    architectures=frozenset({"sd"}),
)
WITH_SD = BUILTIN_EXECUTORS.with_(SD)
SD_SPEC = ModelSpec(id="flux", path="/m/flux.gguf", kind="sd", capabilities=("image",))
LLAMA_SPEC = ModelSpec(id="q", path="/m/q.gguf", kind=Kind.LLAMA)


def _hw(*kinds: str) -> Hardware:
    return Hardware(
        cpu=CPU(threads=4), executors=tuple(ExecutorInfo(kind=k, path=f"/x/{k}") for k in kinds)
    )


def test_executors_is_an_immutable_value() -> None:
    before = BUILTIN_EXECUTORS.profiles
    with pytest.raises(AttributeError):
        BUILTIN_EXECUTORS.profiles = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del BUILTIN_EXECUTORS.secret_flags
    assert WITH_SD is not BUILTIN_EXECUTORS and WITH_SD != BUILTIN_EXECUTORS
    assert BUILTIN_EXECUTORS.profiles == before == (LLAMA, WHISPER)
    assert WITH_SD.profiles == (LLAMA, WHISPER, SD)
    assert "--token" in WITH_SD.secret_flags and "--token" not in BUILTIN_EXECUTORS.secret_flags
    # Equal sets are equal values, usable as keys (`functools.cache` on them works).
    assert BUILTIN_EXECUTORS.with_(SD) == WITH_SD and hash(BUILTIN_EXECUTORS.with_(SD)) == hash(
        WITH_SD
    )


def test_with_replaces_a_kind_in_place() -> None:
    mine = msgspec.structs.replace(LLAMA, binary="my-llama-server")
    ex = BUILTIN_EXECUTORS.with_(mine)
    assert ex.kinds == ("llama", "transcribe") and ex.profile("llama") is mine
    assert BUILTIN_EXECUTORS.profile("llama") is LLAMA
    with pytest.raises(ValueError, match="two profiles of one kind"):
        Executors((LLAMA, LLAMA))
    with pytest.raises(ValueError, match="not a usable kind name"):
        BUILTIN_EXECUTORS.with_(msgspec.structs.replace(SD, kind="Stable Diffusion"))


def test_two_sets_coexist_in_one_process() -> None:
    hw = _hw("llama", "sd")
    # Plan against the built-in set, then the extended one, then the built-in set again:
    # neither call changes what the other knows.
    first = plan_launch(SD_SPEC, hw)
    planned = plan_launch(SD_SPEC, hw, Constraints(port=7860), executors=WITH_SD).unwrap()
    again = plan_launch(SD_SPEC, hw)
    for r in (first, again):
        assert isinstance(r, Failure) and isinstance(r.failure(), UnsupportedKind)
        assert "known: llama, transcribe)" in str(r.failure())
    assert "--listen-port" in planned.args and planned.port == 7860
    # A built-in kind plans the same whichever set it is looked up in.
    c = Constraints(port=8080)
    assert (
        plan_launch(LLAMA_SPEC, hw, c).unwrap()
        == plan_launch(LLAMA_SPEC, hw, c, executors=WITH_SD).unwrap()
    )


def test_kind_is_never_patched() -> None:
    members = dict(Kind.__members__)
    by_value = dict(Kind._value2member_map_)
    plan_launch(SD_SPEC, _hw("sd"), executors=WITH_SD).unwrap()
    config_from_yaml("engines: {sd: {args: [-t, '2']}}\n", "c.yaml", executors=WITH_SD).unwrap()
    msgspec.json.decode(b'{"path": "m", "kind": "sd"}', type=ModelSpec)
    assert dict(Kind.__members__) == members and dict(Kind._value2member_map_) == by_value
    assert [k.value for k in Kind] == ["llama", "transcribe"]
    with pytest.raises(ValueError):
        Kind("sd")
    # A built-in kind read from JSON is a plain string that still equals its member.
    decoded = msgspec.json.decode(b'{"path": "m", "kind": "llama"}', type=ModelSpec)
    assert decoded.kind == Kind.LLAMA and msgspec.json.encode(decoded) == msgspec.json.encode(
        ModelSpec(path="m", kind=Kind.LLAMA)
    )


def test_profiles_are_hashable() -> None:
    assert hash(LLAMA) != hash(WHISPER)
    copy = msgspec.structs.replace(LLAMA, capabilities=dict(LLAMA.capabilities))
    assert copy is not LLAMA and copy == LLAMA and hash(copy) == hash(LLAMA)
    for field in ("capabilities", "images", "resource_flags", "memory_flags", "help_corrections"):
        assert isinstance(getattr(SD, field), FrozenDict), field
    assert isinstance(copy.capabilities, FrozenDict)  # frozen however it was built
    with pytest.raises(TypeError):
        LLAMA.capabilities["chat"] = ()  # type: ignore[index]
    assert {LLAMA: 1}[copy] == 1
    # The flag table is a cached function of the profile: equal profiles share one.
    assert copy.flags is LLAMA.flags is _flag_table(LLAMA)


def test_the_flag_tables_are_built_lazily() -> None:
    code = textwrap.dedent(
        """
        import exedra_engine
        from exedra_engine._core.executors.profile import _flag_table
        print(_flag_table.cache_info().currsize)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


def test_unknown_kinds_name_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    r = plan_launch(ModelSpec(path="/m/x.gguf", kind="vllm"), _hw("llama"))
    assert isinstance(r, Failure)
    assert str(r.failure()) == "unsupported executor kind 'vllm' (known: llama, transcribe)"
    assert "known: llama, transcribe, sd" in _raised(WITH_SD)
    # Override files: file, line and field, as before.
    bad = config_from_yaml("env: {}\nengines:\n  vllm: {args: []}\n", "a.yaml")
    assert isinstance(bad, Failure) and isinstance(bad.failure(), ConfigError)
    assert str(bad.failure()).startswith("a.yaml:3: $.engines.vllm: unknown engine kind 'vllm'")
    # A kind name that is no kind name at all is refused when decoded.
    with pytest.raises(msgspec.ValidationError, match="kind"):
        msgspec.json.decode(b'{"path": "m", "kind": "LLAMA"}', type=ModelSpec)
    with pytest.raises(HardwareFileError, match=r"unknown kind 'sd' \(known: llama"):
        hardware_from_json(
            '{"cpu": {"threads": 2}, "executors": [{"kind": "sd", "path": "/x"}]}', "h"
        )
    argv = ["plan", "--model", "/m/x.gguf", "--kind", "vllm", "--no-port-check"]
    assert main(argv) == 2
    assert "--kind: choose from llama, transcribe" in capsys.readouterr().err
    assert main(argv, executors=WITH_SD) == 2
    assert "--kind: choose from llama, transcribe, sd" in capsys.readouterr().err


def _raised(ex: Executors) -> str:
    with pytest.raises(UnsupportedKind) as e:
        ex.profile("vllm")
    return str(e.value)


def test_a_third_executors_secrets_are_redacted_by_its_set(
    capsys: pytest.CaptureFixture[str],
) -> None:
    c = Constraints(port=7860, extra_args=("--token", "s3cret"))
    plan = plan_launch(SD_SPEC, _hw("sd"), c, executors=WITH_SD).unwrap()
    shown = redact_plan(plan, executors=WITH_SD)
    assert "s3cret" not in shown.args and REDACTED in shown.args
    argv = ["plan", "--model", "/m/flux.gguf", "--kind", "sd", "--executor", str(FAKE)]
    argv += ["--no-port-check", "--arg=--token", "--arg=s3cret"]
    for extra in (["--json"], ["--json", "--explain"], ["--explain"]):
        assert main([*argv, *extra], executors=WITH_SD) == 0
        out = capsys.readouterr().out
        assert "--token" in out and "s3cret" not in out, extra


def test_a_third_executor_is_emitted_from_its_set() -> None:
    plan = plan_launch(SD_SPEC, _hw("sd"), Constraints(port=7860), executors=WITH_SD).unwrap()
    options = EmitOptions(waiter=sys.executable)
    r = emit(plan, Target.SYSTEMD, options)
    assert isinstance(r, Failure) and isinstance(r.failure(), UnsupportedKind)
    files = emit(plan, Target.SYSTEMD, options, executors=WITH_SD).unwrap().files
    (text,) = files.values()
    assert "sd-server" in text or "/x/sd" in text


def test_the_launchers_default_port_reader_knows_the_given_kinds() -> None:
    from exedra_engine._shell.launch.options import LaunchOptions, local_ports

    opts = LaunchOptions[None](executors=WITH_SD)
    assert isinstance(opts.ports_in_use("sd"), frozenset)
    with pytest.raises(UnsupportedKind):
        local_ports("sd")
    mine = LaunchOptions[None](ports=lambda kind: frozenset({1}))
    assert mine.ports_in_use("sd") == frozenset({1})  # a caller's reader is used as it is


def test_an_added_kinds_plan_gets_its_views_from_its_own_profile() -> None:
    from exedra_engine._core.plan.launch_plan import read_plan
    from exedra_engine._core.plan.ports import with_port

    plan = plan_launch(SD_SPEC, _hw("sd"), Constraints(), executors=WITH_SD).unwrap()
    assert plan.port_scanned and plan.args[plan.args.index("--listen-port") + 1] == str(plan.port)
    moved = with_port(plan, plan.port + 7, executors=WITH_SD)
    assert moved.port == plan.port + 7 == read_plan(moved, WITH_SD).resolved().port
    # No built-in profile reads an added kind's argv: edited by hand, the fields stay as given
    # until that kind's profile has read it, and `read_plan` is the one to ask.
    edited = msgspec.structs.replace(plan, args=(*plan.args, "--listen-port", "9911"))
    assert edited.port == plan.port
    assert read_plan(edited, WITH_SD).resolved().port == 9911
