"""Issue 18, the classes behind its two leaks, as properties:

- no error echoes a secret, whatever option or operand it was typed into: every option of
  every command that takes a value (and every operand) is fed a generated key;
- a plan that carries the redaction marker in place of a key cannot be launched, whichever
  route carried the key into it.
"""

from __future__ import annotations

import argparse
import io
import os
from collections.abc import Iterator

import msgspec
import psutil
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.conftest import FAKE, cli

from exedra_engine import (
    CPU,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    LaunchPlan,
    ModelSpec,
    PlanError,
    open_instance,
    plan_launch,
)
from exedra_engine._core.launch.redacted import refuse_redacted
from exedra_engine.cli import build_parser
from exedra_engine.testing import write_tiny_llama

from .conftest import scaled
from .secret_strategies import key_shapes, leaked

# What API keys look like: a short prefix, then letters, digits, '-' and '_'.
secrets = st.from_regex(r"[a-z]{2,4}[-_][A-Za-z0-9_-]{10,30}", fullmatch=True)

# Commands that start no process: every value-taking option of these is fed the key. The
# executor is /usr/bin/true, so a plan that succeeds plans for a binary that does nothing.
_BASE = {
    "probe": [],
    "inspect": ["/nonexistent/m.gguf"],
    "config": ["/nonexistent/engine.d"],
    "plan": [
        "--model",
        "/nonexistent/m.gguf",
        "--kind",
        "llama",
        "--no-config",
        "--executor",
        "/usr/bin/true",
        "--no-port-check",
    ],
    "emit": ["/nonexistent/plan.json", "--target", "k8s"],
    "wait-ready": ["http://127.0.0.1:9/health", "--timeout", "0.2"],
}


def _routes() -> Iterator[tuple[str, str | None]]:
    """(command, option) for each option that takes a value, (command, None) for operands."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sp in sub.choices.items():
        if name not in _BASE:
            continue
        for a in sp._actions:
            if a.option_strings and a.nargs != 0 and a.dest != "help":
                yield name, a.option_strings[-1]
            elif not a.option_strings:
                yield name, None


ROUTES = sorted(_routes(), key=lambda r: (r[0], r[1] or ""))


def test_every_value_taking_option_is_covered() -> None:
    # A new option joins the property by existing: the list is read from the parser.
    assert ("plan", "--api-key-env") in ROUTES and ("plan", "--model") in ROUTES
    assert ("inspect", None) in ROUTES and len(ROUTES) > 30


@pytest.mark.parametrize(("command", "option"), ROUTES)
@settings(max_examples=scaled(5))  # per route: ~40 routes, each example a whole CLI run
@given(key=secrets)
def test_no_error_echoes_a_key_typed_into_any_option(
    command: str, option: str | None, key: str
) -> None:
    base = _BASE[command]
    argv = [command, *base, option, key] if option else [command, key, *base[1:]]
    _, _, err = cli(*argv)
    assert key not in err, (argv, err)
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("models") / "tiny.gguf"
    write_tiny_llama(path)
    return str(path)


# Each route a key can take into a plan: the CLI's variable, a caller variable, a key flag.
_KEY_ROUTES = (
    lambda k: (["--api-key-env", "EXEDRA_PROP_KEY"], {"EXEDRA_PROP_KEY": k}),
    lambda k: ([f"--env=LLAMA_API_KEY={k}"], {}),
    lambda k: ([f"--env=HF_TOKEN={k}"], {}),
    lambda k: ([f"--arg=--api-key={k}"], {}),
    lambda k: (["--arg=--api-key", f"--arg={k}"], {}),
)


@settings(max_examples=scaled(30))
@given(key=secrets, route=st.sampled_from(range(len(_KEY_ROUTES))))
def test_a_saved_plan_never_launches_with_the_marker(tiny: str, key: str, route: int) -> None:
    extra, env = _KEY_ROUTES[route](key)
    argv = ["plan", "--model", tiny, *_BASE["plan"][2:], *extra, "--json"]
    os.environ.update(env)
    try:
        code, out, err = cli(*argv)
        shown = cli(*argv, "--show-secrets").out
    finally:
        for k in env:
            os.environ.pop(k, None)
    assert code == 0, err
    assert key not in out
    with pytest.raises(PlanError, match="redaction marker"):
        refuse_redacted(msgspec.json.decode(out, type=LaunchPlan))
    # The same plan with its key is launchable: only the marker is refused.
    real = msgspec.json.decode(shown, type=LaunchPlan)
    assert key in msgspec.json.encode(real).decode()
    refuse_redacted(real)


@pytest.mark.parametrize(("command", "option"), ROUTES)
@settings(max_examples=scaled(3))  # per route: ~40 routes, each example a whole CLI run
@given(shaped=key_shapes)
def test_no_error_echoes_a_key_of_any_shape_typed_into_any_option(
    command: str, option: str | None, shaped: tuple[str, str]
) -> None:
    # Real keys have /, ., + and = in them (AWS secrets, JWTs, base64): a form that reads
    # as a path, an address or a number is no reason to echo them.
    key = shaped[1]
    base = _BASE[command]
    argv = [command, *base, option, key] if option else [command, key, *base[1:]]
    _, out, err = cli(*argv)
    assert not leaked(key, err) and not leaked(key, out), (argv, err)
    assert "Traceback" not in err


@settings(max_examples=scaled(6))
@given(shaped=key_shapes, route=st.sampled_from(["key", "hf-token", "-hft", "hf_token-env"]))
def test_no_secret_in_a_launched_executors_cmdline(
    tiny: str, shaped: tuple[str, str], route: str
) -> None:
    # /proc/PID/cmdline is readable by every user: keys travel in the environment.
    key = shaped[1]
    args = {"hf-token": ("--hf-token", key), "-hft": (f"-hft={key}",)}.get(route, ())
    spec = ModelSpec(id="m", path=tiny, kind=Kind.LLAMA)
    c = Constraints(
        api_key=key if route == "key" else "",
        extra_args=args,
        extra_env=(f"HF_TOKEN={key}",) if route == "hf_token-env" else (),
        no_gpu=True,
    )
    hw = Hardware(cpu=CPU(threads=2), executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(FAKE)),))
    plan = plan_launch(spec, hw, c).unwrap()

    async def launched() -> tuple[bytes, dict[str, str]]:
        async with open_instance(plan, logs=io.BytesIO()) as inst:
            with open(f"/proc/{inst.pid}/cmdline", "rb") as f:
                cmdline = f.read()
            return cmdline, psutil.Process(inst.pid).environ()

    cmdline, environ = trio.run(launched)
    assert not leaked(key, cmdline.decode("utf-8", "replace")), cmdline
    assert key in environ.values()  # it did reach the executor
