"""One `ExecutorProfile` per executor: everything the code knows about an executor, in one place.

h11 keeps everything that affects its state machine in one file, as tables; this module does
the same for executors. The planner, the endpoint reader, the layering, the launcher and the
prober hold no executor knowledge of their own: they read the profile of the spec's kind. A
new executor is a new profile (and its flag table), added to an `Executors` value
(`BUILTIN.with_(profile)`) that is passed to the functions that look profiles up, with no
change to library code and nothing registered in the process.

The built-in profiles are data, in `exedra_engine._core.executors.builtin`; each field's
docstring here says what it decides.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Final, Literal

import msgspec

from exedra_engine._core.executors.flags import FlagTable, Row, ShortRow, table_from_rows
from exedra_engine._core.executors.kinds import KIND_PATTERN, Kind, KindName, unsupported
from exedra_engine._core.struct import Value, frozen_fields

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
    list_devices_flag: str = ""
    """The flag that prints the devices it sees and exits, in llama.cpp's format
    (`exedra_engine._core.host.devices`); "": it has none, and its devices are the
    kernel's GPUs."""
    device_env: tuple[str, ...] = ()
    """Variables that change which devices it sees (``CUDA_VISIBLE_DEVICES``...): its
    device list is asked under the plan's own values of them, and cached by them."""

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
    cors_flag: str = ""
    """The flag naming the web origins whose pages may call the executor ("": none)."""
    cors_local: str = ""
    """`cors_flag`'s value for pages of this machine only: what a plan with no API key
    passes, unless a layer sets the flag itself."""

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
    router_preset_flag: str = ""
    """Makes the executor a router serving the models a preset file lists (llama.cpp's
    ``--models-preset``); "": it cannot route."""
    router_max_flag: str = ""
    """The router's flag for the most models it holds at once."""
    router_owned: frozenset[str] = frozenset()
    """Flags the router sets on each child itself or keeps to itself: dropped from a member's
    preset section."""
    router_ready_path: str = ""
    """The router's readiness path without an API key (it answers once the preset is read,
    before any model loads); with a key it answers there only to the key, and `ready_path`
    is the public one."""

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
    cpu_flags: frozenset[str] = frozenset()
    """Flags (canonical keys) besides `threads_flag`, `threads_batch_flag`, `cpu_range_flag`
    and `cpu_mask_flag` that set how many threads the executor runs or on which CPUs (the
    batch's, a draft model's, NUMA placement): none of them may be set by a layer of a group
    member, whose CPU share decides them (`exedra_engine._core.group.cpus.own_cpu_setting`)."""
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
    pooled: Mapping[str, str] = msgspec.field(default_factory=dict)
    """The capabilities served from pooled hidden states (embeddings, rerank), and the
    pooling each gets when the model's header names none usable: such a member is planned
    with `pooling_flag`, a context sized for its inputs, one ubatch as large as that context
    (a pooled input is computed in one ubatch) and no prompt cache (`serve_args`)."""
    pooling_flag: str = ""
    """The flag that sets the pooling of `pooled` capabilities ("": none)."""
    weight_flags: frozenset[str] = frozenset()
    """Flags taking a value (every spelling) that decide where the weights go and in what
    copies: layers on devices, overridden tensors, the split, the devices, the fitter, NUMA,
    the load mode. What a short load measured is kept per their values
    (`exedra_engine._shell.extra_buffers`)."""
    weight_switches: frozenset[str] = frozenset()
    """Flags without a value (every spelling) that decide the same: repacking, mapping,
    locking, MoE experts on the CPU."""
    weight_env: frozenset[str] = frozenset()
    """The variables the executor reads for `weight_flags` and `weight_switches`."""
    layers_flags: frozenset[str] = frozenset()
    """The spellings of the flag that sets how many layers go to devices; without it (nor
    `layers_env`) the executor fits the layers by the context."""
    layers_env: str = ""
    """The variable the executor reads for `layers_flags`."""

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
    ``cache_type_k``...; see `exedra_engine._core.memory.settings.ROLES`). Empty: the executor's
    memory is not estimated (its plans carry no ``memory``)."""
    fitter_off_flags: frozenset[str] = frozenset()
    """Flags (canonical keys) whose presence switches the executor's own memory fitting off."""
    chat_template_flags: frozenset[str] = frozenset()
    """Flags (canonical keys) that set the chat template in place of the model's own. Empty:
    the executor serves no chat."""
    chat_fallback: str = ""
    """The template the executor formats chat with when the model has none and no flag of
    `chat_template_flags` is given (llama-server: ChatML)."""
    no_chat_flags: frozenset[str] = frozenset()
    """Flags (canonical keys) that make it serve something other than chat (embeddings,
    reranking)."""
    completions_path: str = ""
    """The raw completions endpoint, which takes a prompt as written (no template)."""

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
            self,
            "help_corrections",
            "capabilities",
            "pooled",
            "images",
            "resource_flags",
            "memory_flags",
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
