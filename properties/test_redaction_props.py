"""No API key in any output, by any route, of any length (issue 14).

The property is differential, so that a one-character key needs no guess about which "1" in
``127.0.0.1`` is the key: every command runs twice, once with the generated keys and once with
each key replaced by a long sentinel. Where keys are redacted where they stand, both runs print
the same bytes, and the sentinel is nowhere in them. A key that leaked would differ between the
runs or show its sentinel. With ``--show-secrets`` the sentinel must appear: the check can fail.

Routes: the caller's ``--api-key-env``, ``--env LLAMA_API_KEY=`` and ``--env HF_TOKEN=``,
``--arg --api-key K`` and ``--arg=--api-key=K``, ``--run-arg --hf-token K``, and an override
file's env, engine env, engine args and model args; several at once, so lower keys are replaced
by higher ones and show only in ``--explain``'s "overrode" entries. Surfaces: plan text,
``--json``, ``--explain`` text and JSON, ``config`` text and JSON, and errors.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hypothesis import assume, given
from hypothesis import strategies as st

from exedra_engine.cli import main

# Keys start with a letter or digit (argparse reads a leading "-" as an option) and hold no
# comma (llama-server would split them; the planner refuses it).
KEYS = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789_-.+/=:@"), min_size=0, max_size=10
).map(lambda s: "k" + s if not s[:1].isalnum() else s)
ROUTES = (
    "key_env",
    "env_key",
    "env_token",
    "arg_key",
    "arg_key_eq",
    "run_arg_token",
    "cfg_env",
    "cfg_engine_env",
    "cfg_engine_args",
    "cfg_model_args",
)
SURFACES = (
    ["plan"],
    ["plan", "--json"],
    ["plan", "--explain"],
    ["plan", "--explain", "--json"],
)
VAR = "EXEDRA_PROP_KEY"


def _sentinel(i: int) -> str:
    return f"ZzSentinelKey{i:02d}QqQq"


def _request(routes: dict[str, str], model: str, config: str) -> tuple[list[str], dict[str, str]]:
    argv = ["--model", model, "--kind", "llama", "--id", "m", "--executor", "/usr/bin/true"]
    argv += ["--no-port-check", "--config", config]
    env = {}
    for route, key in routes.items():
        if route == "key_env":
            argv.append(f"--api-key-env={VAR}")
            env[VAR] = key
        elif route == "env_key":
            argv.append(f"--env=LLAMA_API_KEY={key}")
        elif route == "env_token":
            argv.append(f"--env=HF_TOKEN={key}")
        elif route == "arg_key":
            argv += ["--arg=--api-key", f"--arg={key}"]
        elif route == "arg_key_eq":
            argv.append(f"--arg=--api-key={key}")
        elif route == "run_arg_token":
            argv += ["--run-arg=--hf-token", f"--run-arg={key}"]
    return argv, env


def _config(routes: dict[str, str]) -> str:
    doc: dict[str, object] = {}
    engine: dict[str, object] = {}
    for route, key in routes.items():
        if route == "cfg_env":
            doc["env"] = {"HF_TOKEN": key}
        elif route == "cfg_engine_env":
            engine["env"] = {"LLAMA_API_KEY": key}
        elif route == "cfg_engine_args":
            engine["args"] = ["--api-key", key]
        elif route == "cfg_model_args":
            doc["models"] = {"m": {"args": [f"--api-key={key}"]}}
    if engine:
        doc["engines"] = {"llama": engine}
    return json.dumps(doc)  # JSON is YAML


@contextlib.contextmanager
def _environ(extra: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _environ(env):
        code = main(argv)
    return code, out.getvalue() + "\0" + err.getvalue()


def _outputs(routes: dict[str, str], tmp: Path) -> dict[str, tuple[int, str]]:
    cfg = tmp / "c.yaml"  # one name for both runs: it is printed
    cfg.write_text(_config(routes))
    argv, env = _request(routes, str(tmp / "absent.gguf"), str(cfg))
    outputs = {" ".join(s): _run([*s, *argv], env) for s in SURFACES}
    outputs["config"] = _run(["config", str(cfg)], {})
    outputs["config --json"] = _run(["config", "--json", str(cfg)], {})
    # An error after the keys were read: a port the planner refuses.
    outputs["error"] = _run(["plan", *argv, "--port", "70000"], env)
    return outputs


@given(
    st.dictionaries(st.sampled_from(ROUTES), KEYS, min_size=1, max_size=4),
)
def test_no_key_in_any_output(routes: dict[str, str]) -> None:
    # Equal keys by two routes are one key to the executor, but two sentinels are two.
    assume(len(set(routes.values())) == len(routes))
    sentinels = {r: _sentinel(i) for i, r in enumerate(routes)}  # same order: same argv
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        real = _outputs(routes, tmp)
        ref = _outputs(sentinels, tmp)
    for surface, (code, text) in ref.items():
        for s in sentinels.values():
            assert s not in text, (surface, text)
        # Both runs print the same, key or sentinel: nothing depends on a key's text.
        assert real[surface] == (code, text), surface
    assert real["error"][0] == 2 and "70000" in real["error"][1]


@given(st.sampled_from(ROUTES))
def test_show_secrets_shows_them(route: str) -> None:
    # The differential check above would pass on a CLI that printed nothing: here the same
    # machinery must find the key when asked to show it.
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cfg = tmp / "c.yaml"
        cfg.write_text(_config({route: _sentinel(1)}))
        argv, env = _request({route: _sentinel(1)}, str(tmp / "absent.gguf"), str(cfg))
        code, text = _run(["plan", "--json", "--show-secrets", *argv], env)
        cfg_code, cfg_text = _run(["config", "--show-secrets", str(cfg)], {})
    assert code == 0
    if route.startswith("cfg"):
        assert _sentinel(1) in cfg_text and cfg_code == 0
    assert _sentinel(1) in text
