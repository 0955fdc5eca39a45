"""Emitted argv and env, re-read the way the executor reads them (over its image's own env),
resolve to the plan's host and port; every readiness check asks the plan's ready path; the
key's only source is the mounted file (issue 12: 6)."""

from __future__ import annotations

import json

import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from returns.result import Failure, Success
from tests.emit_cases import MODEL, hardware

from exedra_engine import Constraints, Kind, LaunchPlan, ModelSpec, plan_launch
from exedra_engine._core.emit import EmitOptions, Target, emit
from exedra_engine._core.emit.formats import ini
from exedra_engine._core.executors.builtin import executor_profile
from exedra_engine._core.plan.endpoint import env_dict, resolve
from exedra_engine.errors import EmitError
from properties.strategies import argv, env, keys

LLAMA = executor_profile(Kind.LLAMA)
CRED = "/run/credentials/x.service"


@st.composite
def plans(draw: st.DrawFn) -> LaunchPlan:
    c = Constraints(
        host=draw(st.sampled_from(["0.0.0.0", "::", "10.1.2.3"])),
        port=draw(st.integers(1, 65535)),
        api_key=draw(st.one_of(st.just(""), keys)),
        extra_args=draw(argv(max_size=4)),
        extra_env=tuple(f"{k}={v}" for k, v in draw(env()).items()),
        no_gpu=draw(st.booleans()),
    )
    spec = ModelSpec(
        id=draw(st.sampled_from(["", "qwen", "Qwen 2.5/7B"])), path=MODEL, kind=Kind.LLAMA
    )
    match plan_launch(spec, hardware(draw(st.sampled_from(["nvidia", "amdgpu", "none"]))), c):
        case Success(plan):
            return plan
        case _:
            assume(False)  # a request the planner refuses has nothing to emit
    raise AssertionError


def _emitted(plan: LaunchPlan, target: Target, tree: str) -> dict[str, str] | None:
    match emit(plan, target, EmitOptions(), hardware=hardware(tree)):
        case Success(e):
            return e.files
        case Failure(err):
            # A caller layer may bind loopback or set a secret variable: refused, not emitted.
            assert isinstance(err, EmitError), err
    return None


def _key_file(args: list[str]) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == LLAMA.key_file_flag]


def _agree(p: LaunchPlan, args: list[str], envs: list[str], key_dirs: list[str]) -> None:
    r = resolve(Kind.LLAMA, args, env_dict(envs))
    assert (r.host, r.port) == (p.host, p.port)
    assert r.api_keys == ()
    assert not {LLAMA.key_env} & set(env_dict(envs))
    files = _key_file(args)
    if p.api_key:
        assert len(files) == 1 and any(files[0].startswith(d + "/") for d in key_dirs), files
    else:
        assert files == []


@settings(max_examples=60)
@given(st.data())
def test_emitted_argv_and_env_resolve_to_the_plan(data: st.DataObject) -> None:
    plan = data.draw(plans())
    tree = "nvidia" if "--n-gpu-layers" not in plan.args else "none"
    for target in Target:
        files = _emitted(plan, target, tree)
        if files is None:
            continue
        (text,) = files.values()
        assert plan.api_key == "" or plan.api_key not in text
        if target is Target.K8S:
            docs = [d for d in yaml.safe_load_all(text) if d]
            pod = docs[0]["spec"]["template"]["spec"]
            c = pod["containers"][0]
            envs = [*LLAMA.image_env, *(f"{e['name']}={e['value']}" for e in c.get("env", []))]
            secret = {v["name"] for v in pod["volumes"] if "secret" in v}
            dirs = [m["mountPath"] for m in c["volumeMounts"] if m["name"] in secret]
            _agree(plan, c["args"], envs, dirs)
            for probe in ("startupProbe", "readinessProbe"):
                assert c[probe]["httpGet"]["path"] == plan.ready
                assert c["ports"][0]["name"] == c[probe]["httpGet"]["port"]
            assert c["ports"][0]["containerPort"] == plan.port
            assert docs[1]["spec"]["ports"][0]["targetPort"] == c["ports"][0]["name"]
        elif target is Target.SYSTEMD:
            s = ini.read_ini(text)
            (start,) = ini.setting(s, "Service", "ExecStart")
            argv_ = ini.exec_argv(start, {"d": CRED})
            assert argv_[0] == plan.command
            envs = [
                w
                for v in ini.setting(s, "Service", "Environment")
                for w in ini.split_words(ini.resolve_specifiers(v, {}))
            ]
            _agree(plan, argv_[1:], envs, [CRED])
            (post,) = ini.setting(s, "Service", "ExecStartPost")
            assert ini.exec_argv(post, {})[-1] == plan.url + plan.ready
        else:
            s = ini.read_ini(text)
            args = [w for v in ini.setting(s, "Container", "Exec") for w in ini.exec_argv(v, {})]
            envs = [
                *LLAMA.image_env,
                *(
                    w
                    for v in ini.setting(s, "Container", "Environment")
                    for w in ini.split_words(ini.resolve_specifiers(v, {}))
                ),
            ]
            targets = [
                x.partition("=")[2].rsplit("/", 1)[0]
                for v in ini.setting(s, "Container", "Secret")
                for x in v.split(",")
                if x.startswith("target=")
            ]
            _agree(plan, args, envs, targets)
            (health,) = ini.setting(s, "Container", "HealthCmd")
            assert json.loads(health)[-1] == plan.url + plan.ready
