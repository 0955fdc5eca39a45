"""Strategies for realistic argv, env, configs and plans."""

from __future__ import annotations

from hypothesis import strategies as st

from exedra_engine import (
    CPU,
    Config,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    ModelSpec,
    Override,
)

# Known llama-server flags with their spellings (aliases included) and value shapes.
VALUE_FLAGS = {
    "--ctx-size": ("-c", "--ctx-size"),
    "--threads": ("-t", "--threads"),
    "--n-gpu-layers": ("-ngl", "--gpu-layers", "--n-gpu-layers"),
    "--batch-size": ("-b", "--batch-size"),
    "--alias": ("-a", "--alias"),
    "--temp": ("--temp", "--temperature"),
    "--host": ("--host",),
    "--port": ("--port",),
}
ENV_OF = {
    "--ctx-size": "LLAMA_ARG_CTX_SIZE",
    "--threads": "LLAMA_ARG_THREADS",
    "--n-gpu-layers": "LLAMA_ARG_N_GPU_LAYERS",
    "--batch-size": "LLAMA_ARG_BATCH",
    "--alias": "LLAMA_ARG_ALIAS",
    "--host": "LLAMA_ARG_HOST",
    "--port": "LLAMA_ARG_PORT",
}
SWITCHES = {
    "--webui": (("--ui", "--webui"), ("--no-ui", "--no-webui")),
    "--kv-offload": (("-kvo", "--kv-offload"), ("-nkvo", "--no-kv-offload")),
}
REPEATABLE = ("--lora", "--override-kv")
UNKNOWN = ("--frobnicate", "--experimental-x", "-zz")

numbers = st.integers(1, 99999).map(str)
hosts = st.sampled_from(["127.0.0.1", "0.0.0.0", "::1", "::", "localhost", "10.1.2.3"])
ports = st.integers(1024, 65535).map(str)
names = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)
keys = st.from_regex(r"sk-[A-Za-z0-9]{6,16}", fullmatch=True)


@st.composite
def option(draw: st.DrawFn, *, endpoint: bool = True) -> list[str]:
    """One option as tokens: any spelling, sometimes in --flag=value form."""
    kind = draw(st.sampled_from(["value", "switch", "repeat", "unknown"]))
    if kind == "value":
        choices = [k for k in VALUE_FLAGS if endpoint or k not in ("--host", "--port")]
        key = draw(st.sampled_from(choices))
        spelling = draw(st.sampled_from(VALUE_FLAGS[key]))
        value = draw(
            hosts
            if key == "--host"
            else ports
            if key == "--port"
            else names
            if key == "--alias"
            else numbers
        )
        if spelling.startswith("--") and draw(st.booleans()):
            return [f"{spelling}={value}"]
        return [spelling, value]
    if kind == "switch":
        on, off = SWITCHES[draw(st.sampled_from(sorted(SWITCHES)))]
        return [draw(st.sampled_from(on + off))]
    if kind == "repeat":
        return [draw(st.sampled_from(REPEATABLE)), draw(names)]
    return [draw(st.sampled_from(UNKNOWN))]


def argv(*, endpoint: bool = True, max_size: int = 6) -> st.SearchStrategy[tuple[str, ...]]:
    return st.lists(option(endpoint=endpoint), max_size=max_size).map(
        lambda opts: tuple(t for o in opts for t in o)
    )


def env(*, endpoint: bool = True) -> st.SearchStrategy[dict[str, str]]:
    choices = [e for k, e in ENV_OF.items() if endpoint or k not in ("--host", "--port")]
    return st.dictionaries(
        st.sampled_from([*choices, "OMP_NUM_THREADS", "GGML_X"]), numbers, max_size=3
    )


overrides = st.builds(Override, args=argv(endpoint=False, max_size=3), env=env(endpoint=False))
configs = st.builds(
    Config,
    env=env(endpoint=False),
    engines=st.dictionaries(st.sampled_from(list(Kind)), overrides, max_size=2),
    models=st.dictionaries(st.sampled_from(["tiny", "qwen", "other"]), overrides, max_size=2),
)

HW = Hardware(
    cpu=CPU(threads=4, ram=1 << 33),
    executors=(ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server"),),
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[ModelSpec, Constraints]:
    spec = ModelSpec(
        id=draw(st.sampled_from(["tiny", "qwen", ""])),
        path="/m/model.gguf",
        kind=Kind.LLAMA,
        run_args=draw(argv(endpoint=False, max_size=3)),
    )
    con = Constraints(
        host=draw(st.sampled_from(["", "127.0.0.1", "0.0.0.0"])),
        ctx=draw(st.sampled_from([0, 512, 4096])),
        threads=draw(st.sampled_from([0, 2])),
        port=draw(st.sampled_from([0, 0, 9000])),
        api_key=draw(st.sampled_from(["", "k-1"]) | keys),
        ui=draw(st.booleans()),
        no_gpu=draw(st.booleans()),
        overrides=draw(st.none() | configs),
        extra_args=draw(argv(max_size=3)),
        extra_env=tuple(f"{k}={v}" for k, v in draw(env()).items()),
    )
    return spec, con
