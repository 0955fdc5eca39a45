"""The built-in executors' profiles, as data: llama.cpp's ``llama-server`` and whisper.cpp's
``whisper-server``, and `BUILTIN`, the set every function defaults to.

The built-in profiles were checked against the real binaries (llama-server build 0.10434,
whisper-server 1.8.5); each field's docstring (`ExecutorProfile`) says what it decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from exedra_engine._core.executors import _flagdata
from exedra_engine._core.executors.kinds import Kind
from exedra_engine._core.executors.profile import (
    GGML_EXIT_CAUSES,
    ExecutorProfile,
    Executors,
    ExitCause,
)
from exedra_engine._core.struct import freeze

_LLAMA_MEMORY_FLAGS: Final[Mapping[str, str]] = freeze(
    {
        "ctx": "--ctx-size",
        "parallel": "--parallel",
        "kv_unified": "--kv-unified",
        "cache_type_k": "--cache-type-k",
        "cache_type_v": "--cache-type-v",
        "flash_attn": "--flash-attn",
        "batch": "--batch-size",
        "ubatch": "--ubatch-size",
        "gpu_layers": "--n-gpu-layers",
        "tensor_split": "--tensor-split",
        "split_mode": "--split-mode",
        "override_tensor": "--override-tensor",
        "cpu_moe": "--cpu-moe",
        "n_cpu_moe": "--n-cpu-moe",
        "mmproj": "--mmproj",
        "draft": "--model-draft",
        "cache_ram": "--cache-ram",
        "swa_full": "--swa-full",
        "kv_offload": "--kv-offload",
        "embeddings": "--embeddings",
    }
)
"""llama-server's flags the memory estimate reads, by role (see `ExecutorProfile.memory_flags`)."""

LLAMA: Final = ExecutorProfile(
    kind=Kind.LLAMA,
    binary="llama-server",
    flag_rows=_flagdata.LLAMA_FLAGS,
    table_version="build 0.10434",
    help_style="llama.cpp",
    # `llama-server --version` prints "version: 0.5.0-dev (build 1, commit 0c1e570)" on stderr.
    version_flag="--version",
    # common/arg.cpp common_print_available_devices: "  Vulkan0: DESC (N MiB, N MiB free)".
    list_devices_flag="--list-devices",
    # The backends' own selectors (CUDA, Vulkan, ROCm/HIP, SYCL, MUSA) and the Vulkan loader's
    # choice of driver.
    device_env=(
        "CUDA_VISIBLE_DEVICES",
        "GGML_VK_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "ONEAPI_DEVICE_SELECTOR",
        "MUSA_VISIBLE_DEVICES",
        "VK_ICD_FILENAMES",
        "VK_DRIVER_FILES",
    ),
    # Options whose handler appends rather than replaces (llama.cpp common/arg.cpp push_back).
    repeatable=frozenset(
        {
            "--lora",
            "--lora-scaled",
            "--control-vector",
            "--control-vector-scaled",
            "--override-kv",
            "--reverse-prompt",
            "--logit-bias",
            "--dry-sequence-breaker",
            "--override-tensor",
            "--override-tensor-draft",
            "--api-key",
        }
    ),
    host_env="LLAMA_ARG_HOST",
    port_env="LLAMA_ARG_PORT",
    env_prefix="LLAMA_ARG_",
    unix_socket_suffix=".sock",
    key_flag="--api-key",
    key_env="LLAMA_API_KEY",
    key_file_flag="--api-key-file",
    secret_flags=frozenset({"--api-key", "--hf-token", "-hft"}),
    # Its default is every origin, credentials allowed; "localhost" echoes an Origin only
    # when it is this machine (--help: "reflect the Origin header only if it is localhost").
    cors_flag="--cors-origins",
    cors_local="localhost",
    ready_prefix_flag="--api-prefix",
    ready_prefix_env="LLAMA_ARG_API_PREFIX",
    # Checked with the binary: /slots is on by default (--no-slots turns it off) and needs
    # the API key; /props' default_generation_settings.n_ctx is the context after fitting.
    slots_path="/slots",
    slot_busy_field="is_processing",
    props_path="/props",
    props_ctx=("default_generation_settings", "n_ctx"),
    # Router mode (tools/server/README.md "Model presets"); the owned flags are those
    # server-models.cpp's unset_reserved_args drops and the HOST/PORT/ALIAS it sets itself.
    router_preset_flag="--models-preset",
    router_max_flag="--models-max",
    router_owned=frozenset(
        {
            "--host",
            "--port",
            "--alias",
            "--api-key",
            "--api-key-file",
            "--ssl-key-file",
            "--ssl-cert-file",
            "--models-dir",
            "--models-max",
            "--models-preset",
            "--models-autoload",
        }
    ),
    # Checked with llama-server's router mode: /models answers once the preset is read; with
    # an API key only to the key, while /health (ready_path) stays public.
    router_ready_path="/models",
    alias_flag="--alias",
    alias_separator=",",  # "set model name aliases, comma-separated"
    ctx_flag="--ctx-size",
    threads_batch_flag="--threads-batch",
    cpu_range_flag="--cpu-range",
    cpu_mask_flag="--cpu-mask",
    cpu_strict_flag="--cpu-strict",
    # common/arg.cpp: the batch's and the draft model's threads and CPUs default to the
    # main ones, and --numa places the threads by node ("isolate: only spawn threads on CPUs
    # on the node..."). --cpu-strict (and its kin) and --threads-http change neither.
    cpu_flags=frozenset(
        {
            "--cpu-mask-batch",
            "--cpu-range-batch",
            "--spec-draft-threads",
            "--spec-draft-threads-batch",
            "--spec-draft-cpu-mask",
            "--spec-draft-cpu-range",
            "--spec-draft-cpu-mask-batch",
            "--numa",
        }
    ),
    ui_off_args=("--no-webui",),
    # Otherwise layer placement is llama-server's own fitting (-ngl auto, --fit on): it
    # measures device memory, where an estimate here would drift from the engine.
    cpu_only_args=("--n-gpu-layers", "0"),
    capabilities={"llm": (), "vlm": (), "embeddings": ("--embeddings",), "rerank": ("--rerank",)},
    # /v1/embeddings refuses pooling none ("not OAI compatible"), a model's default when its
    # header names none; /v1/rerank needs rank (tools/server/server-context.cpp).
    pooled={"embeddings": "mean", "rerank": "rank"},
    pooling_flag="--pooling",
    # Where the weights go, and in what copies (common/arg.cpp, llama-model-loader.cpp).
    weight_flags=frozenset(
        {
            *("-ngl", "--n-gpu-layers", "--gpu-layers", "-ot", "--override-tensor"),
            *("-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu"),
            *("-dev", "--device", "-ncmoe", "--n-cpu-moe", "-fit", "--fit", "-fitt"),
            *("--fit-target", "--numa", "--load-mode"),
        }
    ),
    weight_switches=frozenset(
        {
            *("--no-repack", "-nr", "--repack", "--no-mmap", "--mmap", "--mlock"),
            *("--cpu-moe", "-cmoe", "--no-host", "--direct-io", "-dio", "--no-direct-io"),
        }
    ),
    weight_env=frozenset(
        f"LLAMA_ARG_{n}"
        for n in (
            *("N_GPU_LAYERS", "OVERRIDE_TENSOR", "SPLIT_MODE", "TENSOR_SPLIT", "MAIN_GPU"),
            *("DEVICE", "N_CPU_MOE", "CPU_MOE", "FIT", "FIT_TARGET", "NUMA", "MMAP", "NO_MMAP"),
            *("MLOCK", "REPACK", "NO_REPACK", "NO_HOST", "DIO"),
        )
    ),
    layers_flags=frozenset({"-ngl", "--n-gpu-layers", "--gpu-layers"}),
    layers_env="LLAMA_ARG_N_GPU_LAYERS",
    refused_architectures=frozenset({"whisper"}),
    memory_flags=_LLAMA_MEMORY_FLAGS,
    # common/fit.cpp gives up placement when the caller fixed any of these (a row or tensor
    # split mode too: see `memory.fitter_off`).
    fitter_off_flags=frozenset({"--n-gpu-layers", "--tensor-split", "--override-tensor"}),
    # Checked with the binary: a model without tokenizer.chat_template is served with
    # ChatML (/props' chat_template), whatever its own turn markers are.
    chat_template_flags=frozenset({"--chat-template", "--chat-template-file"}),
    chat_fallback="ChatML",
    no_chat_flags=frozenset({"--embeddings", "--reranking"}),
    completions_path="/v1/completions",
    format_hint="plan it as kind transcribe",
    model_file_flags=frozenset(
        {"--model", "--model-draft", "--mmproj", "--lora", "--control-vector"}
    ),
    # ggml-org's images (.devops/*.Dockerfile, target "server"): ENTRYPOINT /app/llama-server,
    # ENV LLAMA_ARG_HOST=0.0.0.0, curl installed for their own HEALTHCHECK.
    images={
        "": "ghcr.io/ggml-org/llama.cpp:server",
        "cuda": "ghcr.io/ggml-org/llama.cpp:server-cuda",
        "hip": "ghcr.io/ggml-org/llama.cpp:server-rocm",
        "vulkan": "ghcr.io/ggml-org/llama.cpp:server-vulkan",
        "sycl": "ghcr.io/ggml-org/llama.cpp:server-intel",
        "musa": "ghcr.io/ggml-org/llama.cpp:server-musa",
    },
    image_command="/app/llama-server",
    image_env=("LLAMA_ARG_HOST=0.0.0.0",),
    image_http_get=("curl", "-fsS", "-o", "/dev/null"),
    # common/arg.cpp: --prio/--prio-batch above 0 call setpriority and SCHED_FIFO for the
    # threads; the masks and --numa set affinity and memory policy; --mlock calls mlock.
    resource_flags={
        "--prio": "priority",
        "--prio-batch": "priority",
        "--cpu-mask": "affinity",
        "--cpu-range": "affinity",
        "--cpu-strict": "affinity",
        "--cpu-mask-batch": "affinity",
        "--cpu-range-batch": "affinity",
        "--cpu-strict-batch": "affinity",
        "--numa": "affinity",
        "--mlock": "memlock",
    },
    # It binds with SO_REUSEADDR: a restart on a port in TIME_WAIT succeeds at once.
    time_wait_blocks_bind=False,
    # Seen with the source-built binary: an unknown flag, a bad or missing value, a port in
    # use, a missing, foreign or truncated model, a KV cache too large for the host.
    exit_causes=(
        *GGML_EXIT_CAUSES,
        ExitCause(kind="memory", pattern=r"failed to allocate buffer for (?P<what>[\w ]+)"),
        ExitCause(kind="memory", pattern=r"failed to allocate compute", what="compute buffers"),
        ExitCause(
            kind="memory", pattern=r"unable to allocate (?P<place>\w+) buffer", what="weights"
        ),
        # The flag alone: in `--flag=value` the value may be a key under a mistyped name.
        ExitCause(kind="argument", pattern=r"error: invalid argument: (?P<flag>[^\s=]+)"),
        ExitCause(
            kind="argument",
            pattern=r'error while handling argument "(?P<flag>[^"]+)": (?P<reason>.+)',
        ),
        ExitCause(
            kind="address",
            pattern=(
                r"couldn't bind HTTP server socket, hostname: (?P<host>\S+), "
                r"port: (?P<port>\d+)"
            ),
        ),
        ExitCause(
            kind="model", pattern=r"error loading model: (?:llama_model_loader: )?(?P<reason>.+)"
        ),
        ExitCause(kind="model", pattern=r"failed to load model,? '(?P<path>[^']+)'"),
    ),
    # tools/fit-params, built from the same source (scripts/install-executors.sh).
    measure_binary="llama-fit-params",
    measure_args=("--fit-print", "on"),
    # The estimate's flags, and the others llama.cpp's model and context params read that
    # change a reservation (common.cpp common_{model,context}_params_to_llama). Server-only
    # ones (--kv-unified, --cache-ram, --mmproj, draft models) the companion cannot be told.
    measure_flags=frozenset(_LLAMA_MEMORY_FLAGS.values())
    | {
        "--main-gpu",
        "--device",
        "--op-offload",
        "--repack",
        "--no-host",
        "--mmap",
        "--override-kv",
        "--rope-scaling",
        "--rope-scale",
        "--rope-freq-base",
        "--rope-freq-scale",
        "--yarn-orig-ctx",
        "--lora",
        "--lora-scaled",
        "--pooling",
        "--reranking",
    },
    slots_flag="--parallel",
    auto_slots=4,  # tools/server/server.cpp: n_parallel < 0 -> 4 slots, kv_unified = true
    unified_flag="--kv-unified",
    # src/llama-kv-cache-iswa.cpp: a unified cache's SWA part holds n_swa * n_seq + n_ubatch
    # cells; one slot with a window n_seq times as wide reserves exactly that.
    window_override=("--override-kv", "{arch}.attention.sliding_window=int:{window}"),
)
"""llama.cpp's ``llama-server``."""

WHISPER: Final = ExecutorProfile(
    kind=Kind.TRANSCRIBE,
    binary="whisper-server",
    flag_rows=_flagdata.WHISPER_FLAGS,
    table_version="version 1.8.5",
    help_style="whisper.cpp",
    help_corrections={
        # whisper-server reads a value after --tmp-dir although its help shows no metavar.
        "--tmp-dir": (("--tmp-dir",), (), 1, (), ""),
        # -fa and -nfa are two help lines but one setting.
        "--flash-attn": (("-fa", "--flash-attn"), ("-nfa", "--no-flash-attn"), 0, (), ""),
        "--no-flash-attn": ((), (), -1, (), ""),
    },
    # No version_flag: whisper-server has no --version (it prints its usage, on stderr).
    ready_prefix_flag="--request-path",
    # whisper-server runs --threads on each of its --processors.
    cpu_flags=frozenset({"--processors"}),
    cpu_only_args=("--no-gpu",),
    capabilities={"asr": ()},
    # VmHWM of whisper-server 1.8.5 (CPU, --threads 1, after one /inference) on models of
    # whisper.cpp's tiny, base and small shapes: the file + 64 MiB + 36 % of it is within
    # -0.3 % to +4.6 % of each peak (scripts/measure_whisper_memory.py, docs/explanation.md).
    resident_estimate=(64 << 20, 360),
    gguf=False,
    architectures=frozenset({"whisper"}),
    format_hint="whisper-server loads ggml whisper models",
    model_file_flags=frozenset({"--model", "--vad-model"}),
    # ggml-org's whisper.cpp images (.devops/main*.Dockerfile): the build tree in /app,
    # ENTRYPOINT ["bash", "-c"] (replaced by the container's command), curl installed.
    images={
        "": "ghcr.io/ggml-org/whisper.cpp:main",
        "cuda": "ghcr.io/ggml-org/whisper.cpp:main-cuda",
        "vulkan": "ghcr.io/ggml-org/whisper.cpp:main-vulkan",
        "sycl": "ghcr.io/ggml-org/whisper.cpp:main-intel",
        "musa": "ghcr.io/ggml-org/whisper.cpp:main-musa",
    },
    image_command="/app/build/bin/whisper-server",
    image_http_get=("curl", "-fsS", "-o", "/dev/null"),
    # It binds without SO_REUSEADDR and fails with "address in use" until TIME_WAIT ends.
    time_wait_blocks_bind=True,
    # Seen with the source-built binary. A value that is not a number ends it by an uncaught
    # std::stoi exception (SIGABRT) that names no flag.
    exit_causes=(
        *GGML_EXIT_CAUSES,
        ExitCause(kind="memory", pattern=r"whisper_model_load: failed to allocate", what="weights"),
        ExitCause(kind="argument", pattern=r"error: unknown argument: (?P<flag>[^\s=]+)"),
        ExitCause(
            kind="argument",
            pattern=r"what\(\):\s+(?P<reason>sto[a-z]+)$",
            what="a value that is not a number",
        ),
        ExitCause(
            kind="address",
            pattern=r"couldn't bind to server socket: hostname=(?P<host>\S+) port=(?P<port>\d+)",
        ),
        ExitCause(kind="model", pattern=r"failed to open '(?P<path>[^']+)'"),
        ExitCause(
            kind="model", pattern=r"whisper_model_load: (?P<reason>invalid model data.*|.*not a .*)"
        ),
        ExitCause(kind="model", pattern=r"error: failed to initialize whisper context"),
    ),
)
"""whisper.cpp's ``whisper-server``: no variables, no API key."""


BUILTIN: Final = Executors((LLAMA, WHISPER))
"""The built-in executors: llama-server and whisper-server (the default everywhere)."""


def executor_profile(kind: str, *, executors: Executors = BUILTIN) -> ExecutorProfile:
    """The profile of `kind` in `executors`, raising `UnsupportedKind` for an unknown one."""
    return executors.profile(kind)
