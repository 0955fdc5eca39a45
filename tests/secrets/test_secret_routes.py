"""The red team's secret reproductions (turn 4, defects 2-6, 11, 12), each as the answer it
should get: no key in any output by any route, keys out of the executor's argv, and the
files that may hold logs created 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import msgspec
import psutil
import pytest

from exedra_engine import Constraints, Endpoint, Hardware, Kind, ModelSpec, plan_launch
from exedra_engine._core.config.overrides import Config, Override
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.plan.planner import explain_launch
from exedra_engine._shell.local.files import open_append
from exedra_engine._trio.launcher import open_instance
from tests.conftest import FAKE, Run, cli, hardware_file

K = "sk-live-abcdef123456"
SURFACES = ([], ["--json"], ["--explain"], ["--explain", "--json"])


def _plan(model: Path, *extra: str) -> list[str]:
    base = ["plan", "--model", str(model), "--kind", "llama", "--executor", str(FAKE)]
    return [*base, "--no-config", "--no-port-check", *extra]


def _shows(ran_out: str, *secrets: str) -> list[str]:
    return [s for s in secrets if s in ran_out]


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(
    "extra",
    [
        ["--arg=--alias", f"--arg=m-{K}"],
        ["--env", f"UPSTREAM=Bearer {K}"],
        ["--env", f"CB=http://u:{K}@h/"],
    ],
    ids=["alias", "bearer", "url"],
)
def test_a_key_inside_a_longer_value_is_hidden_in_every_plan_output(
    tiny_llama: Path, extra: list[str], surface: list[str]
) -> None:
    ran = cli(*_plan(tiny_llama, *extra, *surface))
    assert ran.code == 0, ran.err
    assert _shows(ran.out + ran.err, K, "abcdef123456") == []


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(
    "header", ["Bearer Tr0ub4dor-and-3", "Basic dXNlcjpwYXNzd29yZA=="], ids=["bearer", "basic"]
)
def test_an_http_credential_of_no_key_shape_is_hidden_in_every_plan_output(
    tiny_llama: Path, header: str, surface: list[str]
) -> None:
    ran = cli(*_plan(tiny_llama, "--env", f"UPSTREAM_HEADER={header}", *surface))
    assert ran.code == 0, ran.err
    token = header.split()[1]
    assert _shows(ran.out + ran.err, token, token[:12]) == []
    assert "UPSTREAM_HEADER" in ran.out


@pytest.mark.parametrize("target", ["k8s", "systemd", "quadlet"])
@pytest.mark.parametrize(
    "extra",
    [["--arg=--alias", f"--arg=m-{K}"], ["--env", "HTTPS_PROXY=http://alice:pw@proxy"]],
    ids=["key-in-alias", "url-credentials"],
)
def test_emit_refuses_a_secret_inside_a_value_in_every_unit_type(
    tiny_llama: Path, extra: list[str], target: str
) -> None:
    ran = cli(*_plan(tiny_llama, *extra, "--emit", target))
    assert ran.code == 2 and ran.out == ""
    assert "secret or key file" in ran.err
    assert _shows(ran.err, K, "alice:pw") == []


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(
    "extra",
    [
        ["--env", f"DB_PASS={K}"],
        ["--env", f"MYSQL_PWD={K}"],
        ["--env", f"BASIC_AUTH={K}"],
        ["--env", "HTTPS_PROXY=http://alice:pw@proxy"],
    ],
    ids=["PASS", "PWD", "AUTH", "proxy"],
)
def test_password_words_and_url_credentials_are_hidden(
    tiny_llama: Path, extra: list[str], surface: list[str]
) -> None:
    ran = cli(*_plan(tiny_llama, *extra, *surface))
    assert ran.code == 0, ran.err
    assert _shows(ran.out + ran.err, K, "alice:pw") == []


def test_config_hides_url_credentials_and_password_words(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f'env: {{HTTPS_PROXY: "http://alice:pw@proxy", DB_PASS: "{K}"}}\n', encoding="utf-8"
    )
    for extra in ([], ["--json"]):
        ran = cli("config", *extra, str(cfg))
        assert ran.code == 0, ran.err
        assert _shows(ran.out, K, "alice:pw") == [] and "HTTPS_PROXY" in ran.out


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(
    "extra",
    [
        ["--arg=--api-kee", f"--arg={K}"],
        [f"--arg=--apikey={K}"],
        ["--arg=--hf_token", f"--arg={K}"],
    ],
    ids=["api-kee", "apikey=", "hf_token"],
)
def test_a_mistyped_key_flag_does_not_print_the_key(
    tiny_llama: Path, extra: list[str], surface: list[str]
) -> None:
    ran = cli(*_plan(tiny_llama, *extra, *surface))
    assert _shows(ran.out + ran.err, K, "abcdef123456") == []


def _explained(model: Path, hw: Hardware) -> object:
    spec = ModelSpec(id="m", path=str(model), kind=Kind.LLAMA)
    c = Constraints(
        api_key=K,
        extra_args=("--alias", f"m-{K}", "--hf-token", K),
        extra_env=(f"UPSTREAM=Bearer {K}",),
    )
    return explain_launch(spec, hw, c).unwrap()


def _rich(value: object) -> str:
    # What rich prints: the pairs __rich_repr__ gives, each value by its own repr.
    pairs = value.__rich_repr__()  # type: ignore[attr-defined]
    return repr([(k, v) for k, v in pairs])


def test_explained_and_its_parts_repr_without_the_key(tiny_llama: Path, fake_hw: Hardware) -> None:
    e = _explained(tiny_llama, fake_hw)
    shown = [repr(e), _rich(e)]
    for part in (*e.sources, *e.provenance):  # type: ignore[attr-defined]
        shown += [repr(part), _rich(part)]
    for p in e.provenance:  # type: ignore[attr-defined]
        shown += [repr(p.said), _rich(p.said)]
    assert all(K not in s for s in shown), [s for s in shown if K in s][:1]


def test_rich_repr_of_every_value_hides_the_key(tiny_llama: Path, fake_hw: Hardware) -> None:
    spec = ModelSpec(
        id="m", path=str(tiny_llama), kind=Kind.LLAMA, run_args=("--api-key", K, "--alias", K)
    )
    over = Override(args=("--api-kee", K), env={"DB_PASS": K, "P": f"http://u:{K}@h"})
    cfg = Config(env={"HF_TOKEN": K}, engines={Kind.LLAMA: over}, models={"m": over})
    c = Constraints(api_key=K, extra_args=("--alias", f"m-{K}"), overrides=cfg)
    plan = plan_launch(spec, fake_hw, c).unwrap()
    values = (spec, over, cfg, c, plan, Endpoint(url=f"http://u:{K}@h:1", api_key=K))
    for v in values:
        assert K not in repr(v), repr(v)
        assert K not in _rich(v), _rich(v)


def test_hf_token_travels_in_its_variable_not_argv(tiny_llama: Path) -> None:
    for extra in (["--arg=--hf-token", f"--arg={K}"], [f"--arg=-hft={K}"]):
        ran = cli(*_plan(tiny_llama, *extra, "--json", "--show-secrets"))
        plan = msgspec.json.decode(ran.out, type=LaunchPlan)
        assert K not in " ".join(plan.args)
        assert f"HF_TOKEN={K}" in plan.env


async def test_a_launched_executors_cmdline_holds_no_secret(
    fake_hw: Hardware, tmp_path: Path
) -> None:
    spec = ModelSpec(id="m", path=str(tmp_path / "absent.gguf"), kind=Kind.LLAMA)
    c = Constraints(api_key=K, extra_args=("--hf-token", K + "hf"), no_gpu=True)
    plan = plan_launch(spec, fake_hw, c).unwrap()
    async with open_instance(plan) as inst:
        with open(f"/proc/{inst.pid}/cmdline", "rb") as f:
            cmdline = f.read()
        environ = psutil.Process(inst.pid).environ()
    assert K.encode() not in cmdline and b"--hf-token" not in cmdline
    assert environ.get("HF_TOKEN") == K + "hf" and environ.get("LLAMA_API_KEY") == K


def test_log_file_is_created_0600(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        with open_append(str(tmp_path / "launch.log")) as f:
            f.write(b"x\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "launch.log").stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--env", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        ("--port", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc"),
        ("--ctx", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abc"),
        ("--port", "AKIAIOSFODNN7EXAMPLE"),
    ],
)
def test_key_shaped_values_are_not_echoed_in_errors(
    tiny_llama: Path, option: str, value: str
) -> None:
    ran = cli(*_plan(tiny_llama, option, value))
    assert ran.code == 2
    assert value not in ran.err and "EXAMPLE" not in ran.err and "eyJzdWIi" not in ran.err


def test_wait_ready_never_echoes_a_key_in_the_url() -> None:
    for url in (f"http://127.0.0.1:9/health?key={K}", f"http://u:{K}@127.0.0.1:9/health"):
        ran = cli("wait-ready", url, "--timeout", "0.2")
        assert ran.code == 1 and K not in ran.err + ran.out


def test_config_check_findings_do_not_quote_a_key(tmp_path: Path) -> None:
    # The checker words back what it judges (--temp=KEY, the value after --api-kee).
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        'env: {HTTPS_PROXY: "http://alice:pw@proxy"}\n'
        f'engines: {{llama: {{args: ["--api-kee", "{K}", "--temp={K}", "--alias", "m-{K}"]}}}}\n',
        encoding="utf-8",
    )
    for extra in ([], ["--json"]):
        ran = cli("config", "--check", *extra, str(cfg))
        assert "--api-kee" in ran.out and "--temp" in ran.out
        assert _shows(ran.out + ran.err, K, "abcdef123456", "alice:pw") == []
    shown = cli("config", "--check", "--show-secrets", str(cfg))
    assert K in shown.out


# -- a key copied into other options ----------------------------------------------------

MODEL = "/var/lib/exedra/models/qwen/model.gguf"
COPIED = "sk-copied-key-0123456789"


def _copied_key_argv(*extra: str) -> list[str]:
    return [
        "plan",
        "--model",
        MODEL,
        "--kind",
        "llama",
        "--executor",
        "/nonexistent/llama-server",
        "--no-config",
        "--no-port-check",
        "--api-key-env",
        "EXEDRA_SEAMS_KEY",
        f"--env=OTHER={COPIED}",
        f"--env=LIST=a,{COPIED}",
        "--arg=--alias",
        f"--arg={COPIED}",
        f"--arg=--temp={COPIED}",
        *extra,
    ]


@pytest.mark.parametrize(
    "surface", [(), ("--json",), ("--explain",), ("--explain", "--json"), ("--strict",)]
)
def test_the_key_value_is_hidden_whatever_carries_it(surface: tuple[str, ...], run: Run) -> None:
    r = run(*_copied_key_argv(*surface), env={"EXEDRA_SEAMS_KEY": COPIED})
    assert r.code in (0, 2), r.err
    assert COPIED not in r.out + r.err
    if not surface or surface == ("--json",):
        assert "OTHER=<redacted>" in r.out and "LIST=<redacted>" in r.out
        assert "--alias" in r.out  # the flag stays; only its value is hidden
    shown = run(*_copied_key_argv(*surface, "--show-secrets"), env={"EXEDRA_SEAMS_KEY": COPIED})
    assert COPIED in shown.out + shown.err  # the check can fail


def test_the_engine_flags_are_not_judged_by_what_a_key_equals(run: Run) -> None:
    # Redaction compares whole values, set above the engine layer: a key that happens to
    # equal the bind address does not hide the planner's own --host.
    r = run(
        "plan", "--model", MODEL, "--kind", "llama", "--executor", "/x/llama-server",
        "--no-config", "--no-port-check", "--json", "--api-key-env", "EXEDRA_SEAMS_KEY",
        env={"EXEDRA_SEAMS_KEY": "127.0.0.1"},
    )  # fmt: skip
    plan = msgspec.json.decode(r.out)
    assert plan["host"] == "127.0.0.1" and "127.0.0.1" in plan["args"]


def test_emit_refuses_a_copied_key(tmp_path: Path, run: Run) -> None:
    hw = hardware_file(tmp_path)
    r = run(
        *_copied_key_argv("--hardware", str(hw), "--host", "0.0.0.0", "--emit", "k8s"),
        "--secret",
        "model-key",
        env={"EXEDRA_SEAMS_KEY": COPIED},
    )
    assert r.code == 2 and COPIED not in r.out + r.err
    assert "OTHER" in r.err and "--alias" in r.err
