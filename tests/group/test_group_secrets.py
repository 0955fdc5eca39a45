"""No secret in any group output, and names that can neither collide nor escape: the llama-swap
config and the router preset refuse what ``plan --emit`` refuses (a token, a URL's
credentials, a mistyped key flag, a key-shaped value, a key inside another value) and are
written 0600; the router serves its members with one key or none; a member id cannot be
llama.cpp's global section, derive another member's unit name, or break a unit's line."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

import exedra_engine as engine
from exedra_engine._core.emit.formats.ini import read_ini
from exedra_engine._core.emit.group.llama_swap import llama_swap_file
from exedra_engine._core.emit.group.router import router_plan, router_preset
from exedra_engine._core.emit.group.units import emit_group_files
from exedra_engine._core.group.file import parse_group_file
from exedra_engine._core.group.values import GroupPlan, MemberShare
from exedra_engine._core.targets import Target
from exedra_engine.errors import ConfigError, EmitError, PlanError
from exedra_engine.testing import write_tiny_llama
from tests.conftest import FAKE, Run, cli

K = "sk-live-abcdef1234567890"
R = "Xk9pQ2mZ7vB4nL8wR3tY"  # a key of no known shape
HF = "hf_abcdefghijklmnopqrstuvwxyz0123"
B64 = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY9a"

HW = engine.Hardware(
    cpu=engine.CPU(threads=4),
    executors=(engine.ExecutorInfo(kind=engine.Kind.LLAMA, path="/opt/llama/llama-server"),),
)


def _plan(name: str, **kw: object) -> engine.LaunchPlan:
    spec = engine.ModelSpec(id=name, path=f"/srv/{name}.gguf", kind=engine.Kind.LLAMA)
    return engine.plan_launch(spec, HW, engine.Constraints(**kw)).unwrap()  # type: ignore[arg-type]


def _group(*plans: engine.LaunchPlan) -> GroupPlan:
    shares = tuple(MemberShare(id=p.spec.id, port=p.port, memory=0) for p in plans)
    return GroupPlan(plans=plans, shares=shares, budget=0)


# Each way a member's plan hands its executor a secret that a file of its argv and env
# would carry: the secret, and where the refusal says it stands.
CARRIED = {
    "hf-token-variable": ({"extra_env": (f"HF_TOKEN={HF}",)}, HF, "HF_TOKEN"),
    "aws-secret-variable": ({"extra_env": (f"AWS_SECRET_ACCESS_KEY={B64}",)}, B64, "AWS_SECRET"),
    "proxy-password": ({"extra_env": ("HTTPS_PROXY=http://alice:pw1234@proxy",)}, "pw1234", ""),
    "hf-token-flag": ({"extra_args": ("--hf-token", HF)}, HF, "HF_TOKEN"),
    "model-url-credentials": (
        {"extra_args": ("--model-url", "https://alice:pw1234@h/m.gguf")},
        "pw1234",
        "--model-url",
    ),
    "mistyped-key-flag": ({"extra_args": ("--api-kee", R)}, R, "--api-kee"),
    "mistyped-inline-key-flag": ({"extra_args": (f"--apikey={R}",)}, R, "--apikey"),
    "key-inside-alias": ({"extra_args": ("--alias", f"m-{K}")}, K, "--alias"),
    "key-shaped-value": ({"extra_args": ("--ctx-size", B64)}, B64, "--ctx-size"),
    "bearer-header": ({"extra_env": ("UPSTREAM=Bearer Tr0ub4dor-and-3",)}, "Tr0ub4dor", ""),
}


@pytest.mark.parametrize("output", [llama_swap_file, router_preset], ids=["llama-swap", "router"])
@pytest.mark.parametrize("case", sorted(CARRIED))
def test_a_group_output_refuses_every_secret_a_single_emit_refuses(
    case: str, output: Callable[[GroupPlan], object]
) -> None:
    kw, secret, where = CARRIED[case]
    group = _group(_plan("open", port=18100), _plan("leaky", port=18101, **kw))
    with pytest.raises(EmitError) as e:
        output(group)
    said = str(e.value)
    assert "member leaky" in said and where in said
    assert secret not in said


def test_the_router_preset_refuses_its_own_key_inside_a_value() -> None:
    slots = ("--slot-save-path", f"/var/lib/{R}/slots")
    group = _group(_plan("a", port=18100, api_key=R, extra_args=slots))
    with pytest.raises(EmitError) as e:
        router_preset(group)
    assert "--slot-save-path" in str(e.value) and R not in str(e.value)


def test_a_clean_group_still_gives_both_files() -> None:
    group = _group(_plan("a", port=18100), _plan("b", port=18101, extra_args=("-c", "512")))
    assert "ctx-size = 512" in router_preset(group).text
    assert "--ctx-size 512" in llama_swap_file(group) or "-c 512" in llama_swap_file(group)


def test_a_router_of_keyed_and_open_members_is_refused_naming_both() -> None:
    group = _group(_plan("open", port=18100), _plan("secret", port=18101, api_key=R))
    with pytest.raises(EmitError, match=r"API key \(secret\) and some none \(open\)") as e:
        router_preset(group)
    assert R not in str(e.value)


def test_a_router_of_members_with_different_keys_is_refused_naming_them() -> None:
    other = "Zz9pQ2mZ7vB4nL8wR3tY"
    plans = (
        _plan("x", port=18100, api_key=R),
        _plan("y", port=18101, api_key=other),
        _plan("z", port=18102, api_key=R),
    )
    with pytest.raises(EmitError, match=r"\(x, z\) and \(y\) hold different keys") as e:
        router_preset(_group(*plans))
    assert R not in str(e.value) and other not in str(e.value)


def test_a_router_of_members_sharing_one_key_carries_it_and_drops_none_silently() -> None:
    group = _group(_plan("x", port=18100, api_key=R), _plan("y", port=18101, api_key=R))
    preset = router_preset(group)
    plan = router_plan(group, "/srv/router.ini", preset)
    assert plan.api_key == R and f"LLAMA_API_KEY={R}" in plan.env
    assert R not in preset.text
    assert not [d for d in preset.dropped if "API_KEY" in d]


def test_a_member_id_that_is_llamas_global_section_is_refused() -> None:
    group = _group(_plan("*", port=18100, extra_args=("-c", "64")), _plan("b", port=18101))
    with pytest.raises(EmitError, match="member id '\\*' cannot name a preset section"):
        router_preset(group)


def test_two_ids_that_derive_one_unit_name_are_refused_naming_both() -> None:
    group = _group(_plan("A", port=18100), _plan("a-c917e1", port=18101))
    with pytest.raises(EmitError, match="members 'A' and 'a-c917e1' would both be named"):
        emit_group_files(group, Target.SYSTEMD)


@pytest.mark.parametrize("target", [Target.SYSTEMD, Target.QUADLET])
def test_the_group_target_escapes_a_percent_in_an_id(target: Target) -> None:
    host = "0.0.0.0" if target is Target.QUADLET else ""  # a container binds every address
    plans = (_plan("chat%n", port=18100, host=host), _plan("b", port=18101, host=host))
    files = emit_group_files(_group(*plans), target)
    text = files.files["exedra-group.target"]
    assert "Description=exedra-engine group exedra-group: chat%%n, b" in text
    assert dict(read_ini(text)["Unit"])["Description"].endswith("chat%%n, b")


@pytest.mark.parametrize(
    ("member_id", "said"),
    [
        ('"b\\\\"', "ends in a backslash"),
        ('"b\\nc"', "control character, a line break"),
        ('"b\\x01c"', "control character"),
        ('"b\\tc"', "control character"),
    ],
)
def test_an_id_that_would_break_a_units_line_is_refused_in_one_line(
    member_id: str, said: str
) -> None:
    text = f"members:\n  - {{id: a, model: /m.gguf}}\n  - {{id: {member_id}, model: /m.gguf}}\n"
    with pytest.raises(ConfigError) as e:
        parse_group_file(text, "group.yaml")
    assert str(e.value).startswith("group.yaml:3: members[1]: id: ") and said in str(e.value)
    assert "\n" not in str(e.value)


def test_a_library_group_refuses_an_id_with_a_line_break() -> None:
    spec = engine.ModelSpec(id="b\nc", path="/srv/b.gguf", kind=engine.Kind.LLAMA)
    err = engine.plan_group([engine.GroupMember(spec=spec)], HW).failure()
    assert isinstance(err, PlanError)
    assert str(err).startswith("members[0]: the id holds a control character")


def test_an_unknown_kind_in_a_group_file_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as e:
        parse_group_file(f"members:\n  - {{id: a, model: /m.gguf, kind: {R}}}\n", "g.yaml")
    assert "unknown kind (the value given is not shown" in str(e.value)
    assert R not in str(e.value)


@pytest.fixture
def hardware(tmp_path: Path) -> str:
    f = tmp_path / "hw.json"
    executors = [{"kind": "llama", "path": "/usr/bin/llama-server", "backends": ["cpu"]}]
    f.write_text(json.dumps({"cpu": {"threads": 4}, "gpus": [], "executors": executors}))
    return str(f)


def _group_file(tmp_path: Path, *members: str) -> Path:
    write_tiny_llama(tmp_path / "m.gguf")
    f = tmp_path / "group.yaml"
    f.write_text("members:\n" + "".join(f"  - {m}\n" for m in members))
    return f


@pytest.mark.parametrize("target", ["router", "llama-swap"])
def test_a_group_only_file_is_written_0600(tmp_path: Path, hardware: str, target: str) -> None:
    m = tmp_path / "m.gguf"
    group = _group_file(tmp_path, f"{{id: a, model: {m}}}", f"{{id: b, model: {m}}}")
    out = tmp_path / "out"
    out.mkdir()
    r = cli("plan", "--group", str(group), "--hardware", hardware, "--no-config",
            "--no-port-check", "--emit", target, "--out", str(out))  # fmt: skip
    assert r.code == 0, r.err
    (written,) = os.listdir(out)
    assert stat.S_IMODE((out / written).stat().st_mode) == 0o600


@pytest.mark.parametrize("target", ["router", "llama-swap"])
def test_a_group_file_leaking_a_token_exits_2_with_one_line_per_problem(
    tmp_path: Path, hardware: str, target: str
) -> None:
    m = tmp_path / "m.gguf"
    group = _group_file(
        tmp_path,
        f"{{id: a, model: {m}, env: {{HF_TOKEN: {HF}}}}}",
        f"{{id: b, model: {m}, args: [--api-kee, {R}]}}",
    )
    r = cli("plan", "--group", str(group), "--hardware", hardware, "--no-config",
            "--no-port-check", "--emit", target)  # fmt: skip
    assert r.code == 2 and r.out == ""
    assert HF not in r.err and R not in r.err and "Traceback" not in r.err
    assert all(line.startswith("exedra-engine: error: member ") for line in r.err.splitlines())


def test_launch_router_of_a_keyed_and_an_open_member_starts_nothing(
    tmp_path: Path, run: Run
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "llama-server").symlink_to(FAKE)
    m = tmp_path / "m.gguf"
    group = _group_file(
        tmp_path, f"{{id: open, model: {m}}}", f"{{id: secret, model: {m}, api_key_env: SK}}"
    )
    env = {"EXEDRA_EXECUTORS_BIN": str(bin_dir), "SK": R}
    r = run("launch", "--group", str(group), "--router", "--no-config", env=env)
    assert r.code == 2 and R not in r.err + r.out
    assert r.err.startswith("exedra-engine: error: some llama members have an API key (secret)")
    assert "router " not in r.out  # nothing was started
