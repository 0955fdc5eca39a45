"""Defects found by trying the merged main as a new user would (review of 2026-12-03)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exedra_engine.cli import build_parser
from tests.conftest import FAKE, Run

PLAN = ["--kind", "llama", "--no-config", "--executor", str(FAKE)]


def test_drain_zero_accepted() -> None:
    # launch --help says "default 0: stop at once", but --drain 0 was refused as not positive.
    a = build_parser().parse_args(
        ["launch", "--model", "/m.gguf", "--kind", "llama", "--drain", "0"]
    )
    assert a.drain == 0.0
    a = build_parser().parse_args(
        ["launch", "--model", "/m.gguf", "--kind", "llama", "--drain", "2.5"]
    )
    assert a.drain == 2.5


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "x"])
def test_drain_bad_values_refused(value: str, tiny_llama: Path, run: Run) -> None:
    r = run("launch", "--model", str(tiny_llama), *PLAN, f"--drain={value}")
    assert r.code == 2, r.err
    assert r.err.count("\n") == 1 and "argument --drain:" in r.err, r.err


@pytest.mark.parametrize("host", ["not a host", "a\tb", "-bad", "x..y", "1.2.3.4:80"])
def test_bad_host_refused_at_plan(host: str, tiny_llama: Path, run: Run) -> None:
    # `--host 'not a host'` was planned, and launch then failed with "no known cause in its
    # log": the executor's bind error quotes the host, and the address pattern stops at a blank.
    r = run("plan", "--model", str(tiny_llama), *PLAN, "--arg=--host", f"--arg={host}")
    assert r.code == 2, r.err
    assert r.err.count("\n") == 1 and "--host" in r.err, r.err
    assert "neither an IP address nor a host name" in r.err


@pytest.mark.parametrize(
    "host", ["localhost", "0.0.0.0", "::", "[::1]", "fe80::1", "my-node.example.", "node_1"]
)
def test_good_hosts_planned(host: str, tiny_llama: Path, run: Run) -> None:
    r = run("plan", "--model", str(tiny_llama), *PLAN, "--host", host, "--json")
    assert r.code == 0, r.err


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_wait_ready_url_credentials_not_echoed(scheme: str, run: Run) -> None:
    # wait-ready printed http://user:KEY@host/... whole in its error.
    url = f"{scheme}://user:sk-live-abc123XYZ@127.0.0.1:1/health"
    r = run("wait-ready", "--timeout", "0.3", "--interval", "0.1", url)
    assert r.code in (1, 2), r.err
    assert "sk-live" not in r.err and "sk-live" not in r.out, r.err
    assert "127.0.0.1:1/health" in r.err, r.err


@pytest.mark.parametrize("value", ["sk-live-abc123XYZ", "=x", ""])
@pytest.mark.parametrize("command", ["plan", "launch"])
def test_env_entry_names_the_option(command: str, value: str, tiny_llama: Path, run: Run) -> None:
    # `--env sk-live-...` said "caller env: entry 1 is not KEY=VALUE", naming no option.
    r = run(command, "--model", str(tiny_llama), *PLAN, "--env", value)
    assert r.code == 2, r.err
    assert r.err.count("\n") == 1 and "argument --env: expected K=V" in r.err, r.err
    assert "sk-live" not in r.err


@pytest.mark.parametrize("command", ["probe", "plan"])
def test_measure_missing_model_named(
    command: str, tmp_path: Path, run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    # probe --measure /nope.gguf said "llama-fit-params failed (exit status -6): what():
    # failed to load model" (and plan --measure the same), never that the file is absent.
    # probe plans with the llama-server it finds: a stand-in first on PATH is enough, as the
    # file is checked before anything runs.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "llama-server").symlink_to(FAKE)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ.get('PATH', '')}")
    absent = tmp_path / "absent.gguf"
    argv = (
        ["probe", "--measure", str(absent)]
        if command == "probe"
        else ["plan", "--model", str(absent), *PLAN, "--measure"]
    )
    r = run(*argv)
    assert r.code == 2, r.err
    assert r.err.count("\n") == 1, r.err
    assert f"{absent}: does not exist" in r.err, r.err


@pytest.mark.parametrize("target", ["k8s", "systemd", "quadlet"])
def test_plan_emit_json_refused(target: str, tmp_path: Path, run: Run) -> None:
    # plan --emit ... --json ignored --json: it wrote the files and printed text.
    out = tmp_path / "out"
    argv = ["plan", "--model", "/srv/m.gguf", *PLAN, "--host", "0.0.0.0", "--port", "8080"]
    r = run(*argv, "--emit", target, "--out", str(out), "--json")
    assert r.code == 2, r.err
    assert r.err.count("\n") == 1 and "--json does not go with --emit" in r.err, r.err
    assert not out.exists()


@pytest.mark.parametrize(
    ("key", "said"),
    [
        ("sk-live\nabc123XYZ", "control character"),
        ("sk-live\tabc123XYZ", "control character"),
        ("   ", "blank"),
        (" sk-live-abc123XYZ", "blank"),
        ("sk-live-abc123XYZ\r", "control character"),
    ],
)
def test_unsendable_api_key_refused(key: str, said: str, tiny_llama: Path, run: Run) -> None:
    # A key with a newline, or only blanks, was planned ("api key set"): no client could
    # ever send it, so the server would refuse every request.
    r = run(
        "plan", "--model", str(tiny_llama), *PLAN, "--api-key-env", "RV_KEY", env={"RV_KEY": key}
    )
    assert r.code == 2, r.err
    assert r.err.count("\n") == 1 and said in r.err, r.err
    assert "abc123" not in r.err


def test_sendable_api_key_planned(tiny_llama: Path, run: Run) -> None:
    r = run(
        "plan",
        "--model",
        str(tiny_llama),
        *PLAN,
        "--api-key-env",
        "RV_KEY",
        env={"RV_KEY": "sk-live abc123XYZ"},
    )
    assert r.code == 0, r.err


KEYED_CONFIG = """\
engines:
  llama:
    args: ["--api-key=sk-live-abc123XYZ", --api-kee, sk-live-abc123XYZ]
    env:
      OTHER_VAR: sk-live-abc123XYZ
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["config"],
        ["config", "--json"],
        ["plan", "--model", "/m.gguf", *PLAN[:2], "--executor", str(FAKE)],
        ["plan", "--model", "/m.gguf", *PLAN[:2], "--executor", str(FAKE), "--json"],
        ["plan", "--model", "/m.gguf", *PLAN[:2], "--executor", str(FAKE), "--explain"],
        ["plan", "--model", "/m.gguf", *PLAN[:2], "--executor", str(FAKE), "--explain", "--json"],
    ],
)
def test_key_after_mistyped_flag_redacted(argv: list[str], tmp_path: Path, run: Run) -> None:
    # A key copied after a mistyped flag (`--api-kee KEY`, which the flag table does not tie
    # to a value) was printed by config, plan and plan --explain, though the same files set
    # it under --api-key, so it was a known secret.
    cfg = tmp_path / "keyed.yaml"
    cfg.write_text(KEYED_CONFIG)
    where = [str(cfg)] if argv[0] == "config" else ["--config", str(cfg)]
    r = run(*argv, *where)
    assert r.code in (0, 1), r.err
    assert "abc123" not in r.out and "abc123" not in r.err, r.out
    assert "--api-kee" in r.out
