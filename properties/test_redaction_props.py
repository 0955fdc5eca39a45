"""No API key in any output, by any route, of any length (issue 14).

The CLI property is differential, so that a one-character key needs no guess about which "1"
in ``127.0.0.1`` is the key: every command runs twice, once with the generated keys and once
with each key replaced by a long sentinel. Where keys are redacted where they stand, both runs
print the same text, and the sentinel is nowhere in it. A key that leaked would differ between
the runs or show its sentinel. With ``--show-secrets`` the generated key must appear: the check
can fail.

Routes: the caller's ``--api-key-env``, ``--env LLAMA_API_KEY=`` and ``--env HF_TOKEN=``,
``--arg --api-key K``, ``--arg=--api-key=K`` and ``--arg -hft K``, ``--run-arg --hf-token K``
and ``--run-arg=--api-key=K``, and an override file's env (``HF_TOKEN``, ``LLAMA_API_KEY``),
engine env, engine args in both forms, model args and model env; several at once, so lower
keys are replaced by higher ones and show only in ``--explain``'s "overrode" entries; and an
override that blanks the caller's key (an error while keys are present). Surfaces: plan text,
``--json``, ``--explain`` text and JSON, ``config`` text and JSON, errors (a port out of range,
a malformed ``--env``), and the executor's log lines through the launcher's own log pump.

Log lines are checked against the free-text rule written plainly
(`secret_strategies.reference_redact`): a short key where it stands as a token, a long key
anywhere, nothing else touched.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from tests.log_pump import feed

from exedra_engine import (
    CPU,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    LaunchPlan,
    ModelSpec,
    load_config,
)
from exedra_engine._core.launch.logs import MAX_LINE, LogLines, log_secrets
from exedra_engine._core.plan.endpoint import resolve
from exedra_engine._core.plan.planner import explain_launch
from exedra_engine._core.secrets import TextRedactor, redact_bytes
from exedra_engine._trio.logs import LogPump
from exedra_engine.cli import main
from properties.conftest import scaled
from properties.secret_strategies import (
    PREFIX_SHAPES,
    keys,
    leaked,
    log_lines,
    reference_redact,
    routed_key_shapes,
)

ROUTES = (
    "key_env",
    "env_key",
    "env_token",
    "arg_key",
    "arg_key_eq",
    "arg_hft",
    "run_arg_token",
    "run_arg_key_eq",
    "cfg_env",
    "cfg_env_key",
    "cfg_engine_env",
    "cfg_engine_args",
    "cfg_engine_args_eq",
    "cfg_model_args",
    "cfg_model_env",
)
SURFACES = (
    ["plan"],
    ["plan", "--json"],
    ["plan", "--explain"],
    ["plan", "--explain", "--json"],
)
VAR = "EXEDRA_PROP_KEY"
# What the executor is handed as a secret, named here, not taken from the code under test.
SECRET_VARS = frozenset({"LLAMA_API_KEY", "HF_TOKEN"})
SECRET_FLAGS = frozenset({"--api-key", "--hf-token", "-hft"})
# Routes that set the API key in the caller's layer, above an override that blanks it.
TOP_KEYS = frozenset({"env_key", "arg_key", "arg_key_eq"})


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
        elif route == "arg_hft":
            argv += ["--arg=-hft", f"--arg={key}"]
        elif route == "run_arg_token":
            argv += ["--run-arg=--hf-token", f"--run-arg={key}"]
        elif route == "run_arg_key_eq":
            argv.append(f"--run-arg=--api-key={key}")
    return argv, env


def _config(routes: dict[str, str], blank: bool = False) -> str:
    env: dict[str, str] = {}
    engine: dict[str, Any] = {"env": {}, "args": []}
    model: dict[str, Any] = {"env": {}, "args": []}
    for route, key in routes.items():
        if route == "cfg_env":
            env["HF_TOKEN"] = key
        elif route == "cfg_env_key":
            env["LLAMA_API_KEY"] = key
        elif route == "cfg_engine_env":
            engine["env"]["LLAMA_API_KEY"] = key
        elif route == "cfg_engine_args":
            engine["args"] += ["--api-key", key]
        elif route == "cfg_engine_args_eq":
            engine["args"] += [f"--hf-token={key}"]
        elif route == "cfg_model_args":
            model["args"] += [f"--api-key={key}"]
        elif route == "cfg_model_env":
            model["env"]["HF_TOKEN"] = key
    if blank:  # an admin override that would switch the caller's key off: refused
        model["env"]["LLAMA_API_KEY"] = ""
    doc = {"env": env, "engines": {"llama": engine}, "models": {"m": model}}
    return json.dumps(doc, ensure_ascii=False)  # JSON is YAML; keys as UTF-8 text


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


def _outputs(routes: dict[str, str], blank: bool, tmp: Path) -> dict[str, tuple[int, str]]:
    cfg = tmp / "c.yaml"  # one name for both runs: it is printed
    cfg.write_text(_config(routes, blank), encoding="utf-8")
    argv, env = _request(routes, str(tmp / "absent.gguf"), str(cfg))
    outputs = {" ".join(s): _run([*s, *argv], env) for s in SURFACES}
    outputs["config"] = _run(["config", str(cfg)], {})
    outputs["config --json"] = _run(["config", "--json", str(cfg)], {})
    # Errors after the keys were read: a port the planner refuses, a malformed entry.
    outputs["error port"] = _run(["plan", *argv, "--port", "70000"], env)
    outputs["error env"] = _run(["plan", *argv, "--env=NOEQUALS"], env)
    return outputs


def _handed(plan: LaunchPlan) -> list[str]:
    """The secrets the plan hands its executor, read from the unredacted plan by the names of
    this file, split at commas as llama-server reads a key list."""
    values = [v for n, _, v in (e.partition("=") for e in plan.env) if n in SECRET_VARS]
    for i, tok in enumerate(plan.args):
        name, eq, value = tok.partition("=")
        if tok in SECRET_FLAGS and i + 1 < len(plan.args):
            values.append(plan.args[i + 1])
        elif eq and name in SECRET_FLAGS:
            values.append(value)
    return [k for v in values for k in (v, *v.split(",")) if k]


def _pumped(plan: LaunchPlan, data: bytes, chunk: int) -> tuple[bytes, list[str]]:
    """`data` as the launcher's log pump for `plan` forwards it, fed in `chunk`-byte pieces,
    and the tail it keeps."""
    sink = io.BytesIO()
    pump = LogPump(sink, log_secrets(plan, resolve(plan.spec.kind, plan.args, plan.env)))

    trio.run(feed, pump, data, chunk)
    return sink.getvalue(), list(pump.tail)


def _log_surface(routes: dict[str, str], tmp: Path, chunk: int) -> None:
    # The executor may log any secret it is handed: each one, in the places a log line
    # quotes a key, and inside words, through the launcher's own pump.
    cfg = tmp / "c.yaml"
    cfg.write_text(_config(routes), encoding="utf-8")
    argv, env = _request(routes, str(tmp / "absent.gguf"), str(cfg))
    code, text = _run(["plan", "--json", "--show-secrets", *argv], env)
    assert code == 0, text
    plan = msgspec.json.decode(text.partition("\0")[0], type=LaunchPlan)
    handed = _handed(plan)
    assert handed, plan  # every route hands the executor a secret
    lines = [
        line.format(k=k)
        for k in handed
        for line in ("Bearer {k}", "key={k}", '{{"api_key": "{k}"}}', "q4_{k}_m.gguf", "{k}")
    ]
    forwarded, tail = _pumped(plan, "".join(f"{line}\n" for line in lines).encode(), chunk)
    expected = [reference_redact(line, handed) for line in lines]
    assert forwarded.decode().split("\n")[:-1] == expected
    assert tail == expected[-len(tail) :]


def _routes(max_size: int) -> st.SearchStrategy[dict[str, str]]:
    """Routes, each with its own key: equal keys by two routes are one key to the executor,
    but two sentinels are two."""
    some = st.tuples(st.integers(1, max_size), st.permutations(ROUTES)).map(lambda t: t[1][: t[0]])
    return some.flatmap(
        lambda rs: (
            st.lists(keys, min_size=len(rs), max_size=len(rs), unique=True)
            .map(lambda ks: dict(zip(rs, ks, strict=True)))
            .filter(lambda d: not any(d[r][:1] == "-" for r in SEPARATE_TOKEN if r in d))
        )
    )


# Routes where the key stands as its own argv token after its flag. A key that begins with
# "-" cannot stand there: the executor (and so the checker) reads it as the next flag, and
# the findings then rightly differ from a sentinel's; such a key travels in the = form.
SEPARATE_TOKEN = frozenset({"arg_key", "arg_hft", "run_arg_token"})


@pytest.fixture(scope="module")
def _said_once() -> None:
    """The notes a process says once (a binary's unreadable device list) said before the
    comparisons, so that two runs' outputs differ by their inputs alone."""
    with tempfile.TemporaryDirectory() as d:
        _outputs({"key_env": _sentinel(0)}, False, Path(d))


@pytest.mark.slow  # ~10 s in the CI budget: `just test` runs it, `just test-quick` does not
@pytest.mark.usefixtures("_said_once")
@given(_routes(5), st.booleans())
def test_no_key_in_any_output(routes: dict[str, str], blank: bool) -> None:
    sentinels = {r: _sentinel(i) for i, r in enumerate(routes)}  # same order: args follow it
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        real = _outputs(routes, blank, tmp)
        ref = _outputs(sentinels, blank, tmp)
    for surface, (code, text) in ref.items():
        for s in sentinels.values():
            assert s not in text, (surface, text)
        # Both runs print the same, key or sentinel: nothing depends on a key's text.
        assert real[surface] == (code, text), surface
        if blank and "key_env" in routes and not TOP_KEYS & set(routes) and surface[:4] == "plan":
            assert code == 2, (surface, text)  # the caller's key is never dropped silently
    event(f"plan exit {real['plan --json'][0]}")
    assert real["error port"][0] == 2 and "70000" in real["error port"][1]
    assert real["error env"][0] == 2 and "argument --env: expected K=V" in real["error env"][1]


@given(_routes(4), st.integers(1, 40))
def test_no_handed_key_in_log_lines_as_a_token(routes: dict[str, str], chunk: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        _log_surface(routes, Path(d), chunk)


@given(st.data(), st.lists(keys, min_size=1, max_size=4, unique=True))
def test_log_lines_follow_the_free_text_rule(data: st.DataObject, secrets: list[str]) -> None:
    # Any line, any keys: the compiled rule, on text and on bytes, is the plain one. Keys that
    # extend another (a prefix, a list that holds it) are where the order of the keys shows.
    longer = st.builds(str.__add__, st.sampled_from(secrets), st.sampled_from(["-x", "-", "0"]))
    secrets = list(dict.fromkeys([*secrets, *data.draw(st.lists(longer, max_size=2))]))
    line = data.draw(log_lines(secrets))
    expected = reference_redact(line, secrets)
    r = TextRedactor(secrets)
    assert r.text(line) == expected
    assert r.bytes(line.encode()) == expected.encode()
    assert redact_bytes(line.encode(), secrets) == expected.encode()


@given(st.sampled_from(ROUTES), keys)
def test_show_secrets_shows_them(route: str, key: str) -> None:
    # The differential check above would pass on a CLI that printed nothing: here the same
    # machinery must find the generated key when asked to show it.
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        cfg = tmp / "c.yaml"
        cfg.write_text(_config({route: key}), encoding="utf-8")
        argv, env = _request({route: key}, str(tmp / "absent.gguf"), str(cfg))
        code, text = _run(["plan", "--json", "--show-secrets", *argv], env)
        cfg_code, cfg_text = _run(["config", "--json", "--show-secrets", str(cfg)], {})
    assert code == 0, text
    plan = msgspec.json.decode(text.partition("\0")[0], type=LaunchPlan)
    assert key in _handed(plan), plan
    if route.startswith("cfg"):
        assert cfg_code == 0 and key in _strings(json.loads(cfg_text.partition("\0")[0]))


def _strings(value: object) -> set[str]:
    if isinstance(value, str):
        return {value, *value.partition("=")[::2]}
    if isinstance(value, dict):
        return {s for k, v in value.items() for s in (*_strings(k), *_strings(v))}
    if isinstance(value, list):
        return {s for v in value for s in _strings(v)}
    return set()


# -- every key shape x every route in x every output (issue 30) ------------------------------
# Each route hands the key to the plan in one way a caller or an admin may; `MARKS` are those
# that say where it stands (a key flag or its mistyped neighbour, a secret-named variable, a
# URL's credentials). A key of a shape known only as a whole value (a hex or base64 run) that
# no route marks and every route embeds in a longer value is no secret anyone could tell.
SHAPE_ROUTES: dict[str, Any] = {
    "arg_alias_in": lambda k: (["--arg=--alias", f"--arg=m-{k}"], [], {}),
    "arg_alias_whole": lambda k: (["--arg=--alias", f"--arg={k}"], [], {}),
    "arg_api_key": lambda k: (["--arg=--api-key", f"--arg={k}"], [], {}),
    "arg_api_kee": lambda k: (["--arg=--api-kee", f"--arg={k}"], [], {}),
    "arg_apikey_eq": lambda k: ([f"--arg=--apikey={k}"], [], {}),
    "arg_hf_token": lambda k: (["--arg=--hf-token", f"--arg={k}"], [], {}),
    "arg_hf_underscore": lambda k: (["--arg=--hf_token", f"--arg={k}"], [], {}),
    "run_arg_hf": lambda k: (["--run-arg=--hf-token", f"--run-arg={k}"], [], {}),
    "env_bearer": lambda k: ([], [f"UPSTREAM=Bearer {k}"], {}),
    "env_url_userinfo": lambda k: ([], [f"CB=http://u:{k}@h/"], {}),
    "env_proxy": lambda k: ([], [f"HTTPS_PROXY=http://alice:{k}@proxy:3128"], {}),
    "env_query": lambda k: ([], [f"CB=http://h/v1?api_key={k}"], {}),
    "env_pass": lambda k: ([], [f"DB_PASS={k}"], {}),
    "env_whole": lambda k: ([], [f"OTHER={k}"], {}),
    "api_key_env": lambda k: ([f"--api-key-env={VAR}"], [], {VAR: k}),
    "cfg_env": lambda k: ([], [], {"cfg": {"env": {"HF_TOKEN": k}}}),
    "cfg_env_proxy": lambda k: ([], [], {"cfg": {"env": {"HTTPS_PROXY": f"http://b:{k}@p"}}}),
    "cfg_engine_args": lambda k: (
        [],
        [],
        {"cfg": {"engines": {"llama": {"args": ["--api-key", k]}}}},
    ),
}
EMBEDS = frozenset({"arg_alias_in"})
# Routes that do not say the key is one: a key of no shape given only by these is no secret.
UNMARKED = frozenset({"arg_alias_in", "arg_alias_whole", "env_whole"})
TARGETS = ("k8s", "systemd", "quadlet")


def _shape_request(routes: list[str], key: str, tmp: Path) -> tuple[list[str], dict[str, str]]:
    argv = ["--model", str(tmp / "absent.gguf"), "--kind", "llama", "--id", "m"]
    argv += ["--executor", "/usr/bin/true", "--no-port-check"]
    cfg: dict[str, Any] = {}
    env: dict[str, str] = {}
    for r in routes:
        args, variables, extra = SHAPE_ROUTES[r](key)
        argv += args + [f"--env={v}" for v in variables]
        for part, value in extra.pop("cfg", {}).items():
            for name, sub in value.items():
                cfg.setdefault(part, {}).setdefault(name, sub)
        env.update(extra)
    (tmp / "c.yaml").write_text(json.dumps(cfg), encoding="utf-8")
    return [*argv, "--config", str(tmp / "c.yaml")], env


def _knowable(shape: str, routes: list[str]) -> bool:
    if shape == "http-token":  # ``Bearer`` marks it (a shape of the table), as a key flag does
        return not set(routes) <= UNMARKED
    return shape in PREFIX_SHAPES or not set(routes) <= EMBEDS


@settings(max_examples=scaled(60))
@given(
    routed_key_shapes,
    st.lists(st.sampled_from(sorted(SHAPE_ROUTES)), min_size=1, max_size=3, unique=True),
)
def test_no_key_of_any_shape_by_any_route_in_any_output(
    shaped: tuple[str, str], routes: list[str]
) -> None:
    shape, key = shaped
    assume(_knowable(shape, routes))
    event(f"shape {shape}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        argv, env = _shape_request(routes, key, tmp)
        outputs = {" ".join(s): _run([*s, *argv], env) for s in SURFACES}
        for t in TARGETS:  # refused (exit 2) or written without the key
            outputs[t] = _run(["plan", *argv, "--emit", t], env)
        outputs["config"] = _run(["config", str(tmp / "c.yaml")], {})
        outputs["config --json"] = _run(["config", "--json", str(tmp / "c.yaml")], {})
        code, text = _run(["plan", "--json", "--show-secrets", *argv], env)
        _no_key_in_the_values_reprs(argv, env, shape, key)
    for surface, (_, shown) in outputs.items():
        assert not leaked(key, shown), (surface, shown)
    assert code == 0 and leaked(key, text)  # the key did reach the plan: the check can fail
    plan = msgspec.json.decode(text.partition("\0")[0], type=LaunchPlan)
    for v in (plan, plan.spec):  # reprs, and what rich shows
        assert not leaked(key, repr(v)) and not leaked(key, repr(v.__rich_repr__()))
    _no_key_in_the_log_relay(plan, key)


def _no_key_in_the_values_reprs(argv: list[str], env: dict[str, str], shape: str, key: str) -> None:
    # The same request as library values: Constraints, Config, Explained and its parts, each
    # by repr and by what rich shows.
    cfg = load_config(argv[argv.index("--config") + 1]).unwrap()
    c = Constraints(
        api_key=env.get(VAR, ""),
        extra_args=tuple(a.removeprefix("--arg=") for a in argv if a.startswith("--arg=")),
        extra_env=tuple(a.removeprefix("--env=") for a in argv if a.startswith("--env=")),
        overrides=cfg,
    )
    run_args = tuple(a.removeprefix("--run-arg=") for a in argv if a.startswith("--run-arg="))
    spec = ModelSpec(id="m", path="/absent.gguf", kind=Kind.LLAMA, run_args=run_args)
    hw = Hardware(cpu=CPU(threads=2), executors=(ExecutorInfo(kind=Kind.LLAMA, path="/x"),))
    e = explain_launch(spec, hw, c).unwrap()
    # A lone Source or Provenance has no plan to say that a copy is a key's: it hides what
    # the table decides by itself (key flags, names, URLs, prefixed shapes).
    parts = (*e.sources, *e.provenance) if shape in PREFIX_SHAPES else ()
    for v in (c, cfg, e, *parts):
        assert not leaked(key, repr(v)) and not leaked(key, repr(v.__rich_repr__())), v


def _no_key_in_the_log_relay(plan: LaunchPlan, key: str) -> None:
    # The executor quotes the key as a token, inside words and across the 64 KiB line cut.
    lines = LogLines(log_secrets(plan, resolve(plan.spec.kind, plan.args, plan.env)))
    out = lines.feed(f"Bearer {key}\nkey={key}\nup=http://u:{key}@h/\n".encode())
    for split in (1, len(key) // 2, len(key) - 1):
        out += lines.feed(b"x" * (MAX_LINE + 1) + key[:split].encode())
        out += lines.feed(key[split:].encode() + b"\n")
    text = b"".join(out).decode()
    assert not leaked(key, text)
