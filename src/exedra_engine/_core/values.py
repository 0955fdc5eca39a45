"""The immutable values the library passes around.

Field names are the Go package's JSON tags, so a plan's JSON reads the same in both
languages. Every struct is frozen: `msgspec.structs.replace` makes a changed copy.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET, UnsetType

from exedra_engine._core.config.overrides import Config, redact_config
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.kinds import KindName
from exedra_engine._core.host.devices import Device as Device  # noqa: PLC0414
from exedra_engine._core.host.machine import CPU as CPU  # noqa: PLC0414
from exedra_engine._core.host.machine import GPU as GPU  # noqa: PLC0414
from exedra_engine._core.host.machine import ExecutorInfo as ExecutorInfo  # noqa: PLC0414
from exedra_engine._core.host.machine import Hardware as Hardware  # noqa: PLC0414
from exedra_engine._core.secrets import REDACTED, Hider, redact_shown
from exedra_engine._core.struct import Value


class ModelInfo(Value, frozen=True, kw_only=True):
    """GGUF metadata relevant to planning."""

    path: str
    size: int
    architecture: str
    name: str = ""
    quant: str = ""
    """Quantization name from ``general.file_type`` (``Q4_K_M``, ``F16``); "" when absent."""
    blocks: int = 0
    context: int = 0
    """Training context length from ``{arch}.context_length``; 0 when absent."""
    # UNSET, not a default value: a `ModelInfo` made without these facts (by hand, or by an
    # older version) encodes as it did before they existed.
    chat_template: int | UnsetType = UNSET
    """Bytes of the header's ``tokenizer.chat_template`` (its length: the template is not
    read); 0 when it has none, and llama-server then formats chat in ChatML; UNSET (absent
    from the JSON) when the header was not read for it."""
    tuning: str | UnsetType = UNSET
    """``instruct`` or ``base`` where the header says so (``general.finetune``, or a word of
    ``general.name``/``general.basename``: ``it``, ``instruct``, ``chat``; ``base``, ``pt``);
    "" when it does not say; UNSET when the header was not read for it."""


class ModelFile(Value, frozen=True, kw_only=True):
    """One file the executor reads at load: the model (each shard of a split set), a
    projector, a draft model. The load budget and the container mounts count every one."""

    path: str
    size: int = 0
    """Bytes; 0 when unknown (planned without the file)."""
    role: str = "model"
    """``model``, ``shard``, ``mmproj`` or ``draft``."""


class ModelSpec(Value, frozen=True, kw_only=True, omit_defaults=True):
    """One model to execute; path-based on purpose, the model store stays unknown here."""

    id: str = ""
    """Served name; "" leaves the executor's default."""
    path: str
    """Model weights (GGUF for llama, ggml .bin for transcribe)."""
    kind: KindName
    capabilities: tuple[str, ...] = ()
    """``llm``, ``vlm``, ``embeddings``, ``rerank``, ``asr``."""
    run_args: tuple[str, ...] = ()
    """Model-recommended flags, the lowest layer."""

    def shown_fields(self) -> dict[str, Any]:
        # A key flag in run_args stays out of logs and tracebacks (see `LaunchPlan.__repr__`).
        args, _ = redact_shown(self.run_args, every_value=self.kind not in BUILTIN)
        return {
            "id": self.id,
            "path": Hider().value(self.path),
            "kind": self.kind,
            "capabilities": self.capabilities,
            "run_args": args,
        }

    def __repr__(self) -> str:
        return self.shown_repr()


class Constraints(Value, frozen=True, kw_only=True):
    """What the caller asks of a plan; zero values are derived or left to the executor."""

    host: str = ""
    """Bind address; "" = `DEFAULT_HOST`."""
    ctx: int = 0
    """Context size; 0 = executor default."""
    threads: int = 0
    """CPU threads; 0 = executor default."""
    port: int = 0
    """Exact port; 0 = scan upward from `port_base`."""
    port_base: int = 0
    """First port of the scan; 0 = `DEFAULT_PORT_BASE`."""
    api_key: str = ""
    """"" leaves the executor unauthenticated. Travels in the environment, never in argv."""
    api_key_env: str = ""
    """The variable `api_key` was read from, if any: the plan names it (`LaunchPlan.key_env`)
    so that a saved, redacted plan says where its key lives."""
    no_gpu: bool = False
    """Force the CPU even when a GPU is present."""
    ui: bool = False
    """Keep the executor's web UI enabled."""
    overrides: Config | None = None
    """Admin overrides, applied by engine kind and model id."""
    extra_args: tuple[str, ...] = ()
    """Caller flags, the top layer."""
    extra_env: tuple[str, ...] = ()
    """Caller environment as KEY=VALUE strings, the top layer."""

    def shown_fields(self) -> dict[str, Any]:
        # The key stays out of logs and tracebacks that print values.
        fields = super().shown_fields()
        fields["api_key"] = REDACTED if self.api_key else ""
        fields["extra_args"], fields["extra_env"] = redact_shown(
            self.extra_args, self.extra_env, api_key=self.api_key
        )
        if self.overrides is not None:
            fields["overrides"] = redact_config(self.overrides)
        return fields

    def __repr__(self) -> str:
        return self.shown_repr()


class Endpoint(Value, frozen=True, kw_only=True):
    """The address and API key of a ready instance."""

    url: str
    api_key: str = ""

    def shown_fields(self) -> dict[str, Any]:
        # Keys stay out of logs and tracebacks that print values (a URL's credentials too).
        return {"url": Hider().value(self.url), "api_key": REDACTED if self.api_key else ""}

    def __repr__(self) -> str:
        return self.shown_repr()


def connect_host(host: str) -> str:
    """The address a client uses to reach a server bound to `host` (loopback for wildcards)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "::1"
    return host


def base_url(host: str, port: int) -> str:
    """``http://host:port`` with IPv6 literals bracketed."""
    import ipaddress  # ~1 ms at import; a plan that prints no URL never needs it

    h = connect_host(host)
    try:
        if isinstance(ipaddress.ip_address(h), ipaddress.IPv6Address):
            h = f"[{h}]"
    except ValueError:
        pass
    return f"http://{h}:{port}"
