"""The pure planner: engine flags, layering, errors, ports, determinism, provenance."""

from __future__ import annotations

import msgspec
import pytest
from returns.result import Failure

from exedra_engine import (
    CPU,
    GPU,
    Config,
    Constraints,
    ExecutorInfo,
    ExecutorNotFound,
    Hardware,
    Kind,
    LaunchPlan,
    ModelInfo,
    ModelSpec,
    NoHardware,
    Override,
    PlanError,
    PortInUse,
    explain_launch,
    plan_launch,
    resolve_endpoint,
)
from exedra_engine._core.plan.ports import with_port
from exedra_engine.constants import MAX_THREADS
from tests.conftest import eight_threads

LLAMA = ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server", backends=("cpu", "vulkan"))
LLAMA_CPU = ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server", backends=("cpu",))
WHISPER = ExecutorInfo(kind=Kind.TRANSCRIBE, path="/usr/bin/whisper-server")
GPU_HOST = Hardware(
    cpu=CPU(threads=8, ram=1 << 34),
    gpus=(GPU(card="card0", driver="amdgpu", vram=1 << 34),),
    executors=(LLAMA, WHISPER),
)
CPU_HOST = Hardware(cpu=CPU(threads=8), executors=(LLAMA, WHISPER))
SPEC = ModelSpec(id="qwen", path="/m/qwen.gguf", kind=Kind.LLAMA)
WSPEC = ModelSpec(
    id="whisper", path="/m/ggml-tiny.bin", kind=Kind.TRANSCRIBE, capabilities=("asr",)
)


def plan(spec: ModelSpec = SPEC, hw: Hardware | None = GPU_HOST, **kw: object) -> LaunchPlan:
    return plan_launch(spec, hw, Constraints(**kw)).unwrap()  # type: ignore[arg-type]


def error(
    spec: ModelSpec = SPEC,
    hw: Hardware | None = GPU_HOST,
    *,
    model: ModelInfo | None = None,
    in_use: frozenset[int] = frozenset(),
    **kw: object,
) -> Exception:
    r = plan_launch(
        spec,
        hw,
        Constraints(**kw),
        model=model,  # type: ignore[arg-type]
        ports_in_use=in_use,
    )
    assert isinstance(r, Failure), r
    return r.failure()


def test_llama_engine_flags_on_a_gpu_host() -> None:
    p = plan()
    assert p.command == "/usr/bin/llama-server"
    # GPU placement is left to llama-server's own fitting: no -ngl on a GPU host.
    assert p.args == (
        "--model",
        "/m/qwen.gguf",
        "--alias",
        "qwen",
        "--host",
        "127.0.0.1",
        "--port",
        "18080",
        "--no-webui",
        # No API key: web pages of other sites may not call it (llama-server allows all).
        "--cors-origins",
        "localhost",
    )
    assert (p.host, p.port, p.api_key, p.ready, p.env) == ("127.0.0.1", 18080, "", "/health", ())
    assert p.port_scanned and p.url == "http://127.0.0.1:18080"


def test_constraints_become_flags() -> None:
    p = plan(host="0.0.0.0", port=9000, ctx=4096, threads=6, ui=True, api_key="s3cret")
    assert p.args == (
        "--model",
        "/m/qwen.gguf",
        "--alias",
        "qwen",
        "--host",
        "0.0.0.0",
        "--port",
        "9000",
        "--ctx-size",
        "4096",
        "--threads",
        "6",
    )
    assert p.env == ("LLAMA_API_KEY=s3cret",)
    assert (p.host, p.port, p.api_key, p.port_scanned) == ("0.0.0.0", 9000, "s3cret", False)
    assert p.url == "http://127.0.0.1:9000"
    assert not any("s3cret" in a for a in p.args)


# The flags that keep each kind off the GPU; with a GPU neither appears (llama-server places
# layers itself, whisper-server uses the GPU by default).
CPU_ONLY_FLAGS = {Kind.LLAMA: ("--n-gpu-layers", "0"), Kind.TRANSCRIBE: ("--no-gpu",)}
GPU_FLAG = {Kind.LLAMA: "--n-gpu-layers", Kind.TRANSCRIBE: "--no-gpu"}
SPECS = {Kind.LLAMA: SPEC, Kind.TRANSCRIBE: WSPEC}


def _runs(args: tuple[str, ...], run: tuple[str, ...]) -> int:
    return sum(args[i : i + len(run)] == run for i in range(len(args)))


@pytest.mark.parametrize("kind", [Kind.LLAMA, Kind.TRANSCRIBE], ids=lambda k: k.value)
@pytest.mark.parametrize(
    ("gpus", "backends", "no_gpu", "cpu_only"),
    [
        (GPU_HOST.gpus, ("cpu", "vulkan"), False, False),
        (GPU_HOST.gpus, ("cpu", "vulkan"), True, True),
        ((), ("cpu", "vulkan"), False, True),
        (GPU_HOST.gpus, ("cpu", "blas"), False, True),
        (GPU_HOST.gpus, (), False, True),
    ],
    ids=["gpu", "gpu-but-no_gpu", "no-gpu-on-host", "cpu-backends-only", "no-backends"],
)
def test_cpu_only_decision(
    kind: Kind, gpus: tuple[GPU, ...], backends: tuple[str, ...], no_gpu: bool, cpu_only: bool
) -> None:
    exe = ExecutorInfo(kind=kind, path=f"/usr/bin/{kind.value}-server", backends=backends)
    hw = Hardware(cpu=CPU(threads=8, ram=1 << 34), gpus=gpus, executors=(exe,))
    p = plan(SPECS[kind], hw=hw, no_gpu=no_gpu)
    assert _runs(p.args, CPU_ONLY_FLAGS[kind]) == int(cpu_only), p.args
    assert (GPU_FLAG[kind] in p.args) == cpu_only, p.args
    other = next(k for k in CPU_ONLY_FLAGS if k is not kind)
    assert GPU_FLAG[other] not in p.args


def test_whisper_engine_flags() -> None:
    p = plan(WSPEC, threads=4)
    assert p.args == (
        "--model",
        "/m/ggml-tiny.bin",
        "--host",
        "127.0.0.1",
        "--port",
        "18080",
        "--threads",
        "4",
        "--no-gpu",
    )
    assert p.ready == "/health" and p.api_key == ""


def test_capabilities() -> None:
    p = plan(msgspec.structs.replace(SPEC, capabilities=("llm", "embeddings", "rerank")))
    at = p.args.index("--embeddings")
    assert p.args[at : at + 2] == ("--embeddings", "--rerank")
    e = error(msgspec.structs.replace(SPEC, capabilities=("asr",)))
    assert isinstance(e, PlanError) and "'asr' cannot be served by llama-server" in str(e)
    e = error(msgspec.structs.replace(WSPEC, capabilities=("embeddings",)))
    assert "'embeddings' cannot be served by whisper-server" in str(e)
    assert "'telepathy'" in str(error(msgspec.structs.replace(SPEC, capabilities=("telepathy",))))


@pytest.mark.parametrize(
    ("kw", "kind", "needle"),
    [
        ({"api_key": "zz-secret-zz"}, PlanError, "whisper-server has no API key option"),
        ({"ctx": 512}, PlanError, "no context-size option"),
    ],
)
def test_whisper_refuses_what_it_cannot_do(kw: dict[str, object], kind: type, needle: str) -> None:
    e = error(WSPEC, **kw)
    assert isinstance(e, kind) and needle in str(e)
    assert "zz-secret-zz" not in str(e)


def test_model_architecture_mismatches() -> None:
    whisper_gguf = ModelInfo(path="/m/w.gguf", size=1, architecture="whisper")
    e = error(model=whisper_gguf)
    assert isinstance(e, PlanError) and "plan it as kind transcribe" in str(e)
    llama_gguf = ModelInfo(path="/m/q.gguf", size=1, architecture="qwen2")
    assert "cannot be served by whisper-server" in str(error(WSPEC, model=llama_gguf))
    p = plan_launch(SPEC, GPU_HOST, model=llama_gguf).unwrap()
    assert p.model == llama_gguf


def test_missing_hardware_and_executor() -> None:
    assert isinstance(error(hw=None), NoHardware)
    e = error(hw=Hardware(cpu=CPU(threads=1)))
    assert isinstance(e, ExecutorNotFound) and "llama-server" in str(e)


def test_comma_in_api_key_is_refused_without_echoing_it() -> None:
    e = error(api_key="abc,def")
    assert "comma" in str(e) and "abc" not in str(e)


def test_ports() -> None:
    assert plan_launch(SPEC, GPU_HOST, ports_in_use={18080, 18081}).unwrap().port == 18082
    assert plan(port_base=30000).port == 30000
    e = error(port=8080, in_use=frozenset({8080}))
    assert isinstance(e, PortInUse) and "8080" in str(e) and "explicitly" in str(e)
    assert isinstance(error(port=70000), PlanError)
    assert isinstance(error(port_base=65535, in_use=frozenset({65535})), PortInUse)
    cfg = Config(models={"qwen": Override(args=("--port", "8081"))})
    e = error(overrides=cfg, in_use=frozenset({8081}))
    assert isinstance(e, PortInUse) and "config models.qwen" in str(e)


def test_layer_priority() -> None:
    cfg = Config(
        env={"LLAMA_ARG_CTX_SIZE": "1000", "SHARED": "global"},
        engines={
            Kind.LLAMA: Override(
                args=("--ctx-size", "2000", "--lora", "e.gguf"), env={"SHARED": "engine"}
            )
        },
        models={
            "qwen": Override(args=("-c", "3000"), env={"SHARED": "model"}),
            "other": Override(args=("--ctx-size", "9")),
        },
    )
    spec = msgspec.structs.replace(
        SPEC, run_args=("--ctx-size", "500", "--lora", "r.gguf", "--temp", "0.2", "--no-webui")
    )
    p = plan(spec, overrides=cfg, extra_args=("--temp=0.7",), extra_env=("SHARED=caller",))
    assert p.args.count("--ctx-size") + p.args.count("-c") == 1
    assert p.args[p.args.index("-c") + 1] == "3000"
    assert p.args[p.args.index("--temp") + 1] == "0.7"
    assert [p.args[i + 1] for i, a in enumerate(p.args) if a == "--lora"] == ["r.gguf", "e.gguf"]
    assert p.args.count("--no-webui") == 1
    assert "SHARED=caller" in p.env
    assert not any(e.startswith("LLAMA_ARG_CTX_SIZE=") for e in p.env)


def test_env_variable_above_a_flag_replaces_it() -> None:
    p = plan(extra_env=("LLAMA_ARG_CTX_SIZE=8192",), ctx=1024)
    assert "--ctx-size" not in p.args and "LLAMA_ARG_CTX_SIZE=8192" in p.env
    # On a tie in rank the flag stays, as the executor prefers it.
    cfg = Config(models={"qwen": Override(args=("--threads", "2"), env={"LLAMA_ARG_THREADS": "3"})})
    p = plan(overrides=cfg)
    assert p.args[p.args.index("--threads") + 1] == "2" and not any(
        e.startswith("LLAMA_ARG_THREADS") for e in p.env
    )


def test_caller_port_moves_the_endpoint() -> None:
    p = plan(extra_args=("--port", "9100"))
    assert (p.port, p.port_scanned, p.args.count("--port")) == (9100, False, 1)
    p = plan(extra_env=("LLAMA_ARG_PORT=9200",))
    assert (p.port, "--port" in p.args) == (9200, False)


def test_unknown_flags_pass_through_in_order() -> None:
    spec = msgspec.structs.replace(SPEC, run_args=("--zeta", "1", "--alpha"))
    p = plan(spec, extra_args=("--omega",))
    unknown = [a for a in p.args if a in ("--zeta", "1", "--alpha", "--omega")]
    assert unknown == ["--zeta", "1", "--alpha", "--omega"]


def test_api_keys_never_reach_argv() -> None:
    cfg = Config(models={"qwen": Override(args=("--api-key", "admin-key"))})
    p = plan(overrides=cfg, api_key="caller-key", extra_args=("--api-key", "k3,k4"))
    # Every key flag left argv: what remains is the plan made with the caller's key alone.
    assert p.args == plan(api_key="caller-key").args
    assert not any(k in a for a in p.args for k in ("caller-key", "admin-key", "k3", "k4"))
    assert p.env == ("LLAMA_API_KEY=caller-key,admin-key,k3,k4",)
    assert p.api_key == "caller-key"


def test_bad_inputs_are_plan_errors() -> None:
    e = error(extra_env=("sk-live-abcdef",))
    assert str(e) == "caller env: entry 1 is not KEY=VALUE"
    e = error(extra_args=("--ctx-size",))
    assert str(e) == "caller: flag --ctx-size needs a value"
    e = error(extra_args=("--port", "nope"))
    assert "not a port number" in str(e)


def test_ready_path_follows_the_api_prefix() -> None:
    assert plan(extra_args=("--api-prefix", "/v2/")).ready == "/v2/health"
    assert plan(extra_env=("LLAMA_ARG_API_PREFIX=/x",)).ready == "/x/health"
    assert plan(WSPEC, extra_args=("--request-path", "/asr")).ready == "/asr/health"


def test_deterministic_and_round_trips_through_json() -> None:
    cfg = Config(env={"B": "2", "A": "1"}, models={"qwen": Override(args=("--top-k", "5"))})
    a = msgspec.json.encode(plan(overrides=cfg, api_key="k"))
    b = msgspec.json.encode(plan(overrides=cfg, api_key="k"))
    assert a == b
    decoded = msgspec.json.decode(a, type=LaunchPlan)
    assert decoded == plan(overrides=cfg, api_key="k")
    fields = set(msgspec.json.decode(a))
    assert {"spec", "command", "args", "env", "host", "port", "api_key", "ready"} <= fields


def test_plan_always_agrees_with_resolution() -> None:
    p = plan(api_key="k", extra_env=("LLAMA_ARG_HOST=0.0.0.0",))
    r = resolve_endpoint(p.spec.kind, p.args, p.env).unwrap()
    assert (p.host, p.port, p.api_key) == (r.host, r.port, r.api_key)


def test_explain_names_the_layer_and_what_it_overrode() -> None:
    cfg = Config(
        env={"LLAMA_ARG_CTX_SIZE": "1"}, models={"qwen": Override(args=("--ctx-size", "3"))}
    )
    spec = msgspec.structs.replace(SPEC, run_args=("--ctx-size", "2"))
    e = explain_launch(spec, GPU_HOST, Constraints(overrides=cfg, api_key="k")).unwrap()
    by_text = {s.text: s for s in e.sources}
    ctx = by_text["--ctx-size 3"]
    assert ctx.layer == "config models.qwen"
    assert ctx.overrode == ("run_args: --ctx-size 2", "config env: LLAMA_ARG_CTX_SIZE=1")
    assert by_text["--port 18080"].layer == "engine"
    assert by_text["LLAMA_API_KEY=k"].layer == "engine"


def test_with_port_moves_only_scanned_ports() -> None:
    p = plan()
    moved = with_port(p, 18090)
    assert (moved.port, moved.args[moved.args.index("--port") + 1]) == (18090, "18090")
    with pytest.raises(PlanError, match="never moved"):
        with_port(plan(port=9000), 9001)


def test_on_off_pairs_are_one_setting() -> None:
    # The engine layer says --no-webui (ui=False); a caller's --ui turns it back on, once.
    p = plan(extra_args=("--ui",))
    assert "--ui" in p.args and "--no-webui" not in p.args
    cfg = Config(engines={Kind.LLAMA: Override(args=("-nkvo",))})
    spec = msgspec.structs.replace(SPEC, run_args=("--kv-offload",))
    p = plan(spec, overrides=cfg)
    assert "-nkvo" in p.args and "--kv-offload" not in p.args


def test_repeatable_flags_accumulate_across_layers() -> None:
    cfg = Config(
        engines={Kind.LLAMA: Override(args=("--lora", "b.gguf"))},
        models={"qwen": Override(args=("--override-kv", "x=int:1"))},
    )
    spec = msgspec.structs.replace(SPEC, run_args=("--lora", "a.gguf", "--override-kv", "y=int:2"))
    p = plan(spec, overrides=cfg, extra_args=("--lora", "c.gguf"))
    loras = [p.args[i + 1] for i, a in enumerate(p.args) if a == "--lora"]
    kvs = [p.args[i + 1] for i, a in enumerate(p.args) if a == "--override-kv"]
    assert loras == ["a.gguf", "b.gguf", "c.gguf"]
    assert kvs == ["y=int:2", "x=int:1"]


@pytest.mark.parametrize(
    "c",
    [
        Constraints(),
        Constraints(api_key="k", extra_args=("--seed", "1", "--weird", "-c", "512")),
        Constraints(
            ctx=2048,
            extra_env=("LLAMA_ARG_THREADS=3",),
            overrides=Config(
                env={"LLAMA_ARG_BATCH": "64"},
                engines={Kind.LLAMA: Override(args=("--lora", "a", "--port", "9"))},
                models={"qwen": Override(args=("--lora", "b", "--host", "::1"))},
            ),
        ),
    ],
    ids=["bare", "caller-args", "overrides"],
)
@pytest.mark.parametrize("memory_args", [("--cache-ram", "256"), ("--cache-ram", "0")])
def test_memory_flags_join_the_merge_as_merging_again_would(
    c: Constraints, memory_args: tuple[str, ...]
) -> None:
    from exedra_engine._core.executors.builtin import LLAMA as PROFILE
    from exedra_engine._core.plan.engine_args import plan_layers, with_memory_args
    from exedra_engine._core.plan.layers import merge

    spec = msgspec.structs.replace(SPEC, run_args=("--temp", "0.5", "--jinja"))
    layers = plan_layers(PROFILE, spec, c, 8080, False)
    joined = with_memory_args(merge(PROFILE, layers), PROFILE, layers, memory_args)
    again = merge(PROFILE, plan_layers(PROFILE, spec, c, 8080, False, extra=memory_args))
    assert joined == again
    assert joined.provenance == again.provenance
    assert "--cache-ram" in joined.settings


def test_flags_joined_inside_a_layer_move_the_rest_of_it_on() -> None:
    from exedra_engine._core.executors.builtin import LLAMA as PROFILE
    from exedra_engine._core.plan.layer_checks import Layer
    from exedra_engine._core.plan.layers import join_unset, merge

    low = Layer(name="run_args", rank=0, args=("--temp", "0.5"))
    head, tail = ("-m", "/m.gguf", "--port", "8080"), ("--threads", "2", "--jinja")
    top = Layer(name="caller", rank=5, args=("--threads", "3", "--seed", "1"))
    joined = join_unset(
        merge(PROFILE, [low, Layer(name="engine", rank=1, args=head + tail), top]),
        PROFILE.flags,
        ("--cache-ram", "64"),
        layer="engine",
        at=len(head),
        lower={"run_args"},
    )
    inserted = Layer(name="engine", rank=1, args=(*head, "--cache-ram", "64", *tail))
    again = merge(PROFILE, [low, inserted, top])
    assert joined == again
    assert joined.provenance == again.provenance


@pytest.mark.parametrize("kind", [Kind.LLAMA, Kind.TRANSCRIBE])
def test_threads_above_ggml_cap_refused_by_the_planner(kind: Kind) -> None:
    spec = ModelSpec(path="/m/model.bin", kind=kind)
    ok = plan_launch(spec, eight_threads(), Constraints(threads=MAX_THREADS)).unwrap()
    assert ok.args[ok.args.index("--threads") + 1] == "512"
    for n in (MAX_THREADS + 1, 100_000):
        r = plan_launch(spec, eight_threads(), Constraints(threads=n))
        assert isinstance(r, Failure) and isinstance(r.failure(), PlanError)
        msg = str(r.failure())
        assert f"threads {n} (--threads)" in msg and "more than 512" in msg, msg
