"""One `ExecutorProfile` per executor: everything the code knows about an executor, in one place.

h11 keeps everything that affects its state machine in one file, as tables; this module does
the same for executors. The planner, the endpoint reader, the layering, the launcher and the
prober hold no executor knowledge of their own: they read the profile of the spec's kind. A
new executor is a new profile (and its flag table), added to an `Executors` value
(`BUILTIN.with_(profile)`) that is passed to the functions that look profiles up, with no
change to library code and nothing registered in the process.

The built-in profiles were checked against the real binaries (llama-server build 0.10434,
whisper-server 1.8.5); each field's docstring says what it decides.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Final, Literal

import msgspec

from exedra_engine._core.executors import _flagdata
from exedra_engine._core.executors.flags import FlagTable, Row, ShortRow, table_from_rows
from exedra_engine._core.executors.kinds import KIND_PATTERN, Kind, KindName, unsupported
from exedra_engine._core.struct import Value, freeze, frozen_fields

CauseKind = Literal["memory", "argument", "address", "library", "model"]
"""What an executor's failure line says went wrong (`exedra_engine._core.launch.diagnosis`)."""


class ExitCause(Value, frozen=True, kw_only=True):
    """One line an executor writes when it fails for a known reason.

    `pattern` is searched in each log line; its named groups are kept: ``flag``, ``reason``,
    ``bytes``, ``mib``, ``what``, ``place`` (``CPU``, ``CUDA0``), ``device``, ``lib``,
    ``host``, ``port``, ``path``. `what` labels the allocation when the line does not."""

    kind: CauseKind
    pattern: str
    what: str = ""


# Lines written by ggml itself and by the dynamic loader, the same in every ggml executor
# (ggml-cpu/ggml-backend.cpp, ggml-cuda.cu, ggml-backend-reg.cpp; ld.so).
GGML_EXIT_CAUSES: Final = (
    ExitCause(
        kind="memory", pattern=r"failed to allocate (?P<place>\w+) buffer of size (?P<bytes>\d+)"
    ),
    ExitCause(
        kind="memory", pattern=r"insufficient memory \(attempted to allocate (?P<mib>[\d.]+) MB\)"
    ),
    ExitCause(
        kind="memory",
        pattern=(
            r"allocating (?P<mib>[\d.]+) MiB on device (?P<device>\d+): "
            r"\w+ failed: out of memory"
        ),
    ),
    ExitCause(
        kind="library",
        pattern=r"error while loading shared libraries: (?P<lib>[^:]+): (?P<reason>.+)",
    ),
    ExitCause(
        kind="library", pattern=r"no backends are loaded", what="no ggml backend (libggml-cpu-*.so)"
    ),
    ExitCause(
        kind="library", pattern=r"load_backend: failed to load (?P<lib>\S+?):? (?P<reason>.*)"
    ),
)


class ExecutorProfile(Value, frozen=True, kw_only=True):
    """What one executor reads, accepts and does, as data."""

    kind: KindName
    """Its kind's name (`ModelSpec.kind`, the ``engines:`` key of override files): a `Kind`
    for the built-in executors, any lower-case name for one added with `Executors.with_`."""
    binary: str
    """The executable's name, as found on PATH."""
    flag_rows: tuple[Row | ShortRow, ...]
    """The flag table, generated from the binary's own help: (names, negations, nargs, env,
    takes)."""
    repeatable: frozenset[str] = frozenset()
    """Flags whose repeats add values rather than replace them."""
    table_version: str = ""
    """The build its bundled table (`flag_rows`) was generated from, as shown to users."""
    help_style: str = ""
    """How its ``--help`` text is laid out (`exedra_engine._core.executors.helptext.STYLES`):
    the table of an installed binary is read from it. "": not readable, the bundled table is
    used."""
    help_corrections: Mapping[str, Row] = msgspec.field(default_factory=dict)
    """Facts its help text leaves out, by the last name of the row they replace (a negative
    nargs drops the row), checked against the executor's sources and behaviour."""
    version_flag: str = ""
    """The flag that prints its version ("": it has none)."""

    host_flag: str = "--host"
    port_flag: str = "--port"
    host_env: str = ""
    """The variable the executor reads its bind address from ("": none)."""
    port_env: str = ""
    env_prefix: str = ""
    """The prefix of the variables the executor reads for its flags (``LLAMA_ARG_``): the
    launcher removes inherited ones the plan does not set."""
    unix_socket_suffix: str = ""
    """A host value ending so is a Unix socket, which only TCP-speaking callers refuse."""

    key_flag: str = ""
    """The flag that adds an API key ("": the executor has no API key)."""
    key_env: str = ""
    """The variable the executor reads API keys from; every key flag's value moves here, so no
    key is visible in the process's argv."""
    key_file_flag: str = ""
    """The flag that reads API keys from a file."""
    key_separator: str = ","
    """The executor splits a key value at this character into several keys."""
    secret_flags: frozenset[str] = frozenset()
    """Flags whose value is a secret: redacted wherever argv is shown."""

    ready_path: str = "/health"
    """Answers 200 only once the model is loaded."""
    ready_prefix_flag: str = ""
    """A flag that moves every path under a prefix (llama-server's ``--api-prefix``)."""
    ready_prefix_env: str = ""
    slots_path: str = ""
    """Lists the executor's slots, each saying whether it works on a request ("": none): a
    draining stop waits until none does."""
    slot_busy_field: str = ""
    props_path: str = ""
    """Says what the executor really runs with ("": nothing to ask)."""
    props_ctx: tuple[str, ...] = ()
    """Where the context it really allocated stands in `props_path`'s answer."""

    model_flag: str = "--model"
    alias_flag: str = ""
    """The flag that names the served model after `ModelSpec.id` ("": none)."""
    alias_separator: str = ""
    """The executor splits the alias value at this character into several names ("": never)."""
    ctx_flag: str = ""
    """The context-size flag ("": the executor has none, and `Constraints.ctx` is refused)."""
    threads_flag: str = "--threads"
    threads_batch_flag: str = ""
    """The flag for the threads of prompt processing ("": the executor has one thread count)."""
    cpu_range_flag: str = ""
    """The flag that pins the executor to a range of CPUs (``lo-hi``; "": it cannot be told)."""
    cpu_mask_flag: str = ""
    """The flag that pins it to a set of CPUs given as a hex mask (a set that is no range)."""
    cpu_strict_flag: str = ""
    """The flag that makes the pinning strict (one thread a CPU), given ``1`` by a group plan."""
    resident_estimate: tuple[int, int] = (0, 0)
    """For an executor whose memory is not estimated from the model's header (empty
    `memory_flags`): its resident peak as (bytes, per mille of the model file), added to the
    file's size; (0, 0): not estimated. Measured against the real executor's VmHWM."""
    ui_off_args: tuple[str, ...] = ()
    """Added unless `Constraints.ui`: switch the executor's web UI off."""
    cpu_only_args: tuple[str, ...] = ()
    """Added when the plan runs on the CPU only."""
    capabilities: Mapping[str, tuple[str, ...]] = msgspec.field(default_factory=dict)
    """What the executor serves, and the flags each capability adds."""

    model_file_flags: frozenset[str] = frozenset({"--model"})
    """Flags (canonical keys) whose value is a model file. An emitter for a container rewrites
    each to its mount point, and mounts the directory that holds them."""
    images: Mapping[str, str] = msgspec.field(default_factory=dict)
    """The executor's published server image by GGML backend (``cuda``, ``hip``...); the
    ``""`` entry is the CPU image. An emitter's default when no image is given."""
    image_command: str = ""
    """The executor's path inside those images (the container's command)."""
    image_env: tuple[str, ...] = ()
    """KEY=VALUE variables those images set (their ``ENV``) that the executor reads: a lower
    layer under the plan's env, which the endpoint read-back must see."""
    image_http_get: tuple[str, ...] = ()
    """A command in those images that exits 0 when a URL (appended) answers 2xx: the
    container health check."""
    resource_flags: Mapping[str, str] = msgspec.field(default_factory=dict)
    """Flags (canonical keys) that need something of the system a hardened unit denies by
    default: ``priority`` (a value above 0 raises the scheduling priority), ``affinity``
    (CPU or NUMA placement), ``memlock`` (locks the model in RAM)."""

    memory_flags: Mapping[str, str] = msgspec.field(default_factory=dict)
    """The flags (canonical keys) the memory estimate reads, by role (``ctx``, ``parallel``,
    ``cache_type_k``...; see `exedra_engine._core.memory.estimate.ROLES`). Empty: the executor's
    memory is not estimated (its plans carry no ``memory``)."""
    fitter_off_flags: frozenset[str] = frozenset()
    """Flags (canonical keys) whose presence switches the executor's own memory fitting off."""

    gguf: bool = True
    """Whether its models are GGUF files (whisper-server's are ggml .bin files, whose header
    `inspect` cannot read: then the plan is made without it)."""
    architectures: frozenset[str] = frozenset()
    """The GGUF architectures it serves (empty: any but `refused_architectures`)."""
    refused_architectures: frozenset[str] = frozenset()
    format_hint: str = ""
    """Said when a model of another architecture is refused."""
    time_wait_blocks_bind: bool = False
    """Whether a port with sockets in TIME_WAIT is unusable to it (no SO_REUSEADDR)."""
    exit_causes: tuple[ExitCause, ...] = GGML_EXIT_CAUSES
    """The lines it writes when it fails for a known reason: a launch that ends before it is
    ready is classified by them (`exedra_engine._core.launch.diagnosis`)."""

    measure_binary: str = ""
    """Its memory-measuring companion, built beside it ("": none): run with the plan's memory
    flags and `measure_args`, it prints what the executor would reserve, per device and for
    the host, from a load that allocates nothing (llama.cpp's ``llama-fit-params``)."""
    measure_args: tuple[str, ...] = ()
    """Added to the companion's argv: what makes it print its figures."""
    measure_flags: frozenset[str] = frozenset()
    """Flags (canonical keys) that change what the executor reserves. The companion is given
    those of the plan that its own table knows; the others it cannot be told."""
    slots_flag: str = ""
    """The flag that sets the number of parallel slots ("": none)."""
    auto_slots: int = 0
    """The slots the executor runs when `slots_flag` is unset or -1 (llama-server: 4, sharing
    one unified KV cache); the companion, which has no "auto", is told this number."""
    unified_flag: str = ""
    """The flag that makes all slots share one KV cache (implied by `auto_slots`)."""
    window_override: tuple[str, ...] = ()
    """How the companion, which cannot be told of a shared cache and is given one slot, is
    made to size sliding-window layers as the shared cache does (one window per slot): the
    flag and value, formatted with the model's ``arch`` and the ``window`` to set."""

    def __post_init__(self) -> None:
        frozen_fields(
            self, "help_corrections", "capabilities", "images", "resource_flags", "memory_flags"
        )

    def __hash__(self) -> int:
        # Hashing every field costs ~9 us (the flag rows), and the tables below are looked up
        # a dozen times per plan: equal profiles have equal binaries, all a hash must keep.
        return hash(self.binary)

    @property
    def flags(self) -> FlagTable:
        """The flag table, built on first use (building both tables at import costs ~8 ms)."""
        return _flag_table(self)

    @property
    def has_api_key(self) -> bool:
        """Whether the executor can be told to require an API key."""
        return bool(self.key_flag or self.key_env)

    @property
    def key_flags(self) -> frozenset[str]:
        """Every flag that configures authentication."""
        return _key_flags(self)

    def serves_architecture(self, arch: str) -> bool:
        """Whether a GGUF model of `arch` is one this executor loads."""
        if arch in self.refused_architectures:
            return False
        return not self.architectures or arch in self.architectures


@functools.cache
def _flag_table(profile: ExecutorProfile) -> FlagTable:
    return table_from_rows(profile.binary, profile.flag_rows, profile.repeatable)


@functools.cache
def _key_flags(profile: ExecutorProfile) -> frozenset[str]:
    # Asked per token by the checker: built once per profile, not per call.
    return frozenset(f for f in (profile.key_flag, profile.key_file_flag) if f) | (
        profile.secret_flags
    )


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
    flag_rows=_flagdata.LLAMA,
    table_version="build 0.10434",
    help_style="llama.cpp",
    # `llama-server --version` prints "version: 0.5.0-dev (build 1, commit 0c1e570)" on stderr.
    version_flag="--version",
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
    ready_prefix_flag="--api-prefix",
    ready_prefix_env="LLAMA_ARG_API_PREFIX",
    # Checked with the binary: /slots is on by default (--no-slots turns it off) and needs
    # the API key; /props' default_generation_settings.n_ctx is the context after fitting.
    slots_path="/slots",
    slot_busy_field="is_processing",
    props_path="/props",
    props_ctx=("default_generation_settings", "n_ctx"),
    alias_flag="--alias",
    alias_separator=",",  # "set model name aliases, comma-separated"
    ctx_flag="--ctx-size",
    threads_batch_flag="--threads-batch",
    cpu_range_flag="--cpu-range",
    cpu_mask_flag="--cpu-mask",
    cpu_strict_flag="--cpu-strict",
    ui_off_args=("--no-webui",),
    # Otherwise layer placement is llama-server's own fitting (-ngl auto, --fit on): it
    # measures device memory, where an estimate here would drift from the engine.
    cpu_only_args=("--n-gpu-layers", "0"),
    capabilities={"llm": (), "vlm": (), "embeddings": ("--embeddings",), "rerank": ("--rerank",)},
    refused_architectures=frozenset({"whisper"}),
    memory_flags=_LLAMA_MEMORY_FLAGS,
    # common/fit.cpp gives up placement when the caller fixed any of these (a row or tensor
    # split mode too: see `memory.fitter_off`).
    fitter_off_flags=frozenset({"--n-gpu-layers", "--tensor-split", "--override-tensor"}),
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
    flag_rows=_flagdata.WHISPER,
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

_KIND_NAME: Final = re.compile(KIND_PATTERN)


class Executors:
    """The executors a function knows: an immutable set of profiles, one per kind.

    Passed to whatever looks a profile up (planning, `resolve_endpoint`, the checker, emit,
    redaction, probing, the launchers), which default to `BUILTIN`. A new executor is
    ``BUILTIN.with_(profile)``: a new value, so two sets coexist in one process and neither
    sees the other's kinds.
    """

    __slots__ = ("_by_kind", "key_flags", "profiles", "secret_flags")

    profiles: tuple[ExecutorProfile, ...]
    """In a stable order: the built-in ones first, then as added."""
    secret_flags: frozenset[str]
    """The flags of any of them whose value is a secret (redacted wherever argv is shown)."""
    key_flags: frozenset[str]
    """The flags of any of them that configure authentication."""
    _by_kind: Mapping[str, ExecutorProfile]

    def __init__(self, profiles: Iterable[ExecutorProfile]) -> None:
        ps = tuple(profiles)
        by_kind = {p.kind: p for p in ps}
        if len(by_kind) != len(ps):
            raise ValueError("two profiles of one kind: replace one with `with_`")
        for k in by_kind:
            if not _KIND_NAME.match(k):
                raise ValueError(f"not a usable kind name: {k!r} (lower case: {KIND_PATTERN})")
        object.__setattr__(self, "profiles", ps)
        object.__setattr__(self, "_by_kind", by_kind)
        object.__setattr__(self, "secret_flags", frozenset().union(*(p.secret_flags for p in ps)))
        object.__setattr__(self, "key_flags", frozenset().union(*(p.key_flags for p in ps)))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Executors is immutable; build a new one ({name})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Executors is immutable ({name})")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Executors) and other.profiles == self.profiles

    def __hash__(self) -> int:
        return hash(self.profiles)

    def __repr__(self) -> str:
        return f"Executors(kinds={self.kinds!r})"

    def __iter__(self) -> Iterator[ExecutorProfile]:
        return iter(self.profiles)

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_kind

    @property
    def kinds(self) -> tuple[str, ...]:
        """Every kind, in the order of `profiles`."""
        return tuple(self._by_kind)

    def with_(self, profile: ExecutorProfile) -> Executors:
        """A new set with `profile` added, or replacing the profile of its kind in place."""
        if profile.kind in self._by_kind:
            return Executors(profile if p.kind == profile.kind else p for p in self.profiles)
        return Executors((*self.profiles, profile))

    def profile(self, kind: str) -> ExecutorProfile:
        """The profile of `kind`, raising `UnsupportedKind` (naming the known ones)."""
        p = self._by_kind.get(kind)
        if p is None:
            raise unsupported(kind, self.kinds)
        return p

    def kind_of(self, s: str) -> str:
        """`s` as a kind of this set (the `Kind` member for a built-in one), raising
        `UnsupportedKind` naming the known ones."""
        p = self.profile(s)
        return Kind(p.kind) if p.kind in Kind.__members__.values() else p.kind

    def is_secret_flag(self, name: str) -> bool:
        """Whether `name` is a flag of any of these executors whose value is a secret."""
        return name in self.secret_flags

    def foreign_key_flags(self, profile: ExecutorProfile) -> frozenset[str]:
        """The key flags of the other executors that `profile`'s executor does not have:
        given to it, they would sit in its argv (visible in /proc) and do nothing, so they
        are refused."""
        return _foreign_key_flags(self.key_flags, profile)


@functools.cache
def _foreign_key_flags(key_flags: frozenset[str], profile: ExecutorProfile) -> frozenset[str]:
    table = profile.flags
    return frozenset(f for f in key_flags if table.lookup(f) is None)


BUILTIN: Final = Executors((LLAMA, WHISPER))
"""The built-in executors: llama-server and whisper-server (the default everywhere)."""


def executor_profile(kind: str, *, executors: Executors = BUILTIN) -> ExecutorProfile:
    """The profile of `kind` in `executors`, raising `UnsupportedKind` for an unknown one."""
    return executors.profile(kind)
