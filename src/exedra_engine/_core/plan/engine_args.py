"""The flags a plan derives itself, and the layers every plan is merged from.

Engine flags are derived here and nowhere else (`engine_args`): from the spec, the host and
the caller's constraints, and what the memory plan decided (`with_memory_args`, joined to the
merge without merging again). `plan_layers` stacks them with the
spec's run_args, the override files' sections and the caller's own args and env, each layer
with its rank (lowest first; see `exedra_engine._core.plan.planner`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Final, NamedTuple

from exedra_engine._core.config.findings import Finding
from exedra_engine._core.config.overrides import Config, Override
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.memory.estimate import pooled_logits_bytes, vocab_output
from exedra_engine._core.memory.explain import size_text
from exedra_engine._core.memory.settings import settings_of
from exedra_engine._core.plan.layer_checks import Layer
from exedra_engine._core.plan.layers import Merged, env_items, join_unset
from exedra_engine._core.struct import freeze
from exedra_engine._core.values import Constraints, ModelSpec
from exedra_engine.constants import DEFAULT_HOST

RANK_RUN_ARGS = 0
RANK_ENGINE = 1
RANK_CONFIG_ENV = 2
RANK_CONFIG_ENGINE = 3
RANK_CONFIG_MODEL = 4
RANK_CALLER = 5
_NAMES = freeze(
    {
        RANK_RUN_ARGS: "run_args",
        RANK_ENGINE: "engine",
        RANK_CALLER: "caller",
        RANK_CONFIG_ENV: "config env",
    }
)
"""The names of the layers every plan has (`plan_layers`); the config sections' names say which
section (`_config_names`)."""


POOLED_CTX: Final = 8192
"""The context a pooled member (embeddings, rerank) of an encoder (BERT and its kin) is
planned with when the caller sets none and the model's own is larger: embedding inputs are
passages, not conversations, and the whole input is one ubatch, whose compute buffer grows
with it (`pooled_serving`)."""
POOLED_DECODER_CTX: Final = 2048
"""The same for a decoder used for embeddings (any model with an output head): llama.cpp
computes the vocabulary's logits for every token of a pooled input, 8 bytes per vocabulary
entry and token (`pooled_logits_bytes`: 4 GiB for 2,048 tokens of Gemma 3's 262,144), so
its context is kept to what most passages need."""
POOLING_NAMES: Final = ("none", "mean", "cls", "last", "rank")
"""llama.cpp's pooling types by the number a GGUF header stores (``{arch}.pooling_type``)."""
_EMBEDDING_POOLINGS: Final = frozenset({"mean", "cls", "last"})


class Pooled(NamedTuple):
    """How a member served from pooled hidden states is planned (`pooled_serving`)."""

    capability: str
    pooling: str
    ctx: int
    """The context the engine layer plans (the caller's when it set one)."""
    note: str
    """Why, for the plan's notes."""


def pooled_serving(
    profile: ExecutorProfile,
    spec: ModelSpec,
    c: Constraints,
    model_ctx: int,
    pooling: int,
    *,
    architecture: str = "",
    vocab: int = 0,
) -> Pooled | None:
    """The pooling and context of a member whose capabilities are pooled
    (`ExecutorProfile.pooled`: embeddings, rerank), from the caller's context, the model's
    trained context `model_ctx` (0: unknown), its header's pooling type `pooling` (-1:
    none named), its `architecture` ("": unknown) and `vocab` (tokens; 0: unknown); None
    for any other member."""
    # (Most members serve no pooled capability: tested before the list is built.)
    if not profile.pooling_flag or profile.pooled.keys().isdisjoint(spec.capabilities):
        return None
    caps = [cap for cap in spec.capabilities if cap in profile.pooled]
    cap = caps[-1]
    chosen, said = _pooling(profile.pooled[cap], pooling, cap)
    ctx, why = _pooled_ctx(c.ctx, model_ctx, architecture, vocab)
    note = (
        f"{cap}: {profile.pooling_flag} {chosen} ({said}); ctx {ctx}, {why}; batch and "
        f"ubatch {ctx}, so an input as long as the context is one ubatch (a pooled input "
        "must be: a longer one is refused); no prompt cache (nothing is reused); a layer "
        "that sets one of them decides"
    )
    return Pooled(capability=cap, pooling=chosen, ctx=ctx, note=note)


def _pooling(default: str, pooling: int, cap: str) -> tuple[str, str]:
    """The pooling a `cap` member gets, from its header's `pooling` type, and why."""
    own = POOLING_NAMES[pooling] if 0 <= pooling < len(POOLING_NAMES) else ""
    if default != "rank" and own in _EMBEDDING_POOLINGS:
        return own, "the model's own (its header's pooling_type)"
    if own:
        return default, f"its header's {own} cannot serve {cap}"
    return default, "its header names none, and none is what llama.cpp would use"


def _pooled_ctx(asked: int, model_ctx: int, architecture: str, vocab: int) -> tuple[int, str]:
    """The context a pooled member gets, and why."""
    decoder = vocab_output(architecture)
    top = POOLED_DECODER_CTX if decoder else POOLED_CTX
    if asked:
        ctx, why = asked, "the context asked for"
    elif model_ctx and model_ctx <= top:
        ctx, why = model_ctx, "the model's trained context"
    else:
        trained = f"the model's {model_ctx}" if model_ctx else "the model's (header not read)"
        ctx, why = top, f"for embedding inputs ({trained} is sized for conversations)"
    if decoder:
        per = f"{size_text(pooled_logits_bytes(vocab, 1))} a token" if vocab else "per token"
        why += (
            f"; a decoder computes the vocabulary's logits for every token of a pooled input "
            f"({per}), so an input as long as the context holds "
            + (size_text(pooled_logits_bytes(vocab, ctx)) if vocab else "that much")
            + " at once: set ctx for longer inputs"
        )
    return ctx, why


def engine_args(
    profile: ExecutorProfile,
    spec: ModelSpec,
    c: Constraints,
    port: int,
    cpu_only: bool,
    *,
    pooled: Pooled | None = None,
) -> tuple[str, ...]:
    """The flags the engine layer derives from the spec, the host and the constraints
    (what the memory plan decides joins them later: `with_memory_args`), and those that
    serve a pooled capability (`pooled`)."""
    p = profile
    args = [p.model_flag, spec.path]
    if p.alias_flag and spec.id:
        args += [p.alias_flag, spec.id]
    args += [p.host_flag, c.host or DEFAULT_HOST, p.port_flag, str(port)]
    if c.ctx:
        args += [p.ctx_flag, str(c.ctx)]
    if pooled is not None:
        args += _pooled_args(p, pooled, ctx_set=bool(c.ctx))
    if c.threads:
        args += [p.threads_flag, str(c.threads)]
    if not c.ui:
        args += p.ui_off_args
    if cpu_only:
        args += p.cpu_only_args
    for cap in spec.capabilities:
        args += p.capabilities[cap]
    return tuple(args)


def _pooled_args(p: ExecutorProfile, pooled: Pooled, *, ctx_set: bool) -> list[str]:
    flags = p.memory_flags
    out = [p.pooling_flag, pooled.pooling]
    if not ctx_set:
        out += [p.ctx_flag, str(pooled.ctx)]
    for role in ("batch", "ubatch"):
        if role in flags:
            out += [flags[role], str(pooled.ctx)]
    if "cache_ram" in flags:
        out += [flags["cache_ram"], "0"]
    return out


def plan_layers(
    profile: ExecutorProfile,
    spec: ModelSpec,
    c: Constraints,
    port: int,
    cpu_only: bool,
    *,
    extra: tuple[str, ...] = (),
    pooled: Pooled | None = None,
) -> list[Layer]:
    """The layers of a plan for `spec`, lowest first: run_args, the engine's own flags (and
    the API key's variable), the caller's, and the override sections that reach `spec`.
    `extra` ends the engine's flags (a group member's threads and CPU set); `pooled` is how
    a pooled capability is served (`pooled_serving`)."""
    o = c.overrides
    extra_env = env_items(c.extra_env, "caller env")
    engine_env = ((profile.key_env, c.api_key),) if c.api_key else ()
    layers = [
        Layer(name=_NAMES[RANK_RUN_ARGS], rank=RANK_RUN_ARGS, args=spec.run_args),
        Layer(
            name=_NAMES[RANK_ENGINE],
            rank=RANK_ENGINE,
            args=engine_args(profile, spec, c, port, cpu_only, pooled=pooled) + extra,
            env=engine_env,
        ),
        Layer(name=_NAMES[RANK_CALLER], rank=RANK_CALLER, args=c.extra_args, env=extra_env),
    ]
    if o is not None:
        if o.env:
            layers.append(
                Layer(name=_NAMES[RANK_CONFIG_ENV], rank=RANK_CONFIG_ENV, env=tuple(o.env.items()))
            )
        names = _config_names(spec)
        eng, mod = override_sections(o, spec)
        if eng is not None:
            layers.append(
                Layer(
                    name=names[0],
                    rank=RANK_CONFIG_ENGINE,
                    args=eng.args,
                    env=tuple(eng.env.items()),
                )
            )
        if mod is not None:
            layers.append(
                Layer(
                    name=names[1],
                    rank=RANK_CONFIG_MODEL,
                    args=mod.args,
                    env=tuple(mod.env.items()),
                )
            )
    return layers


def with_memory_args(
    merged: Merged,
    profile: ExecutorProfile,
    layers: Sequence[Layer],
    memory_args: Sequence[str],
    *,
    after: int = 0,
) -> Merged:
    """`merged` (of `layers`) with the flags the memory plan decided where `engine_args` puts
    them, as if `plan_layers` had been given them: the memory plan adds only settings that no
    layer set (`MemoryDecision.engine_args`), so they join the merge as they are. `after`
    counts the engine layer's last tokens that follow them (flags appended to `engine_args`)."""
    engine = next(layer for layer in layers if layer.rank == RANK_ENGINE)
    return join_unset(
        merged,
        profile.flags,
        memory_args,
        layer=engine.name,
        at=len(engine.args) - after,
        lower={layer.name for layer in layers if layer.rank < RANK_ENGINE},
    )


def override_sections(o: Config, spec: ModelSpec) -> tuple[Override | None, Override | None]:
    """The sections of `o` that are layers of `spec`'s plan: its kind's and its model's
    (none for a spec without an id); no other section reaches it."""
    return o.engines.get(spec.kind), (o.models.get(spec.id) if spec.id else None)


def _config_names(spec: ModelSpec) -> tuple[str, str]:
    """The names of the override layers of `spec`: its kind's section, its model's section."""
    return f"config engines.{spec.kind}", f"config models.{spec.id}"


def local_cors(profile: ExecutorProfile, merged: Merged, table: FlagTable) -> tuple[str, ...]:
    """The flags that keep web pages of other sites from calling an executor that has no
    API key (``--cors-origins localhost``: llama-server allows every origin by default,
    credentials included, so any page the user visits could call the local model): when the
    merge sets no key (flag, key file or variable), no layer sets the flag or its variable
    (a user's own value wins), and `table` (the installed binary's, else the bundled one)
    knows the flag; else none."""
    flag = profile.cors_flag
    if not flag or table.lookup(flag) is None or _keyed(profile, merged):
        return ()
    if flag in merged.settings or not merged.env_map.keys().isdisjoint(_flag_env(profile, flag)):
        return ()
    return (flag, profile.cors_local)


OPEN_CORS = "open-cors"
"""The code of the note a plan carries when its executor, with no API key, stays open to
every web page (`cors_findings`)."""


def cors_findings(
    profile: ExecutorProfile, merged: Merged, table: FlagTable | None
) -> list[Finding]:
    """The note of a plan whose executor has no API key and whose installed binary (`table`,
    None when its help was not read) lacks `profile.cors_flag`: nothing is added, and every
    web page the user visits may call it."""
    flag = profile.cors_flag
    if not flag or table is None or table.lookup(flag) is not None or _keyed(profile, merged):
        return []
    message = (
        f"this {profile.binary} has no {flag}: with no API key, any web page the user visits "
        "may call it (its default allows every origin); plan with an API key, or bind it "
        "where no browser reaches"
    )
    return [Finding(severity="note", code=OPEN_CORS, path="engine", token=flag, message=message)]


def _keyed(profile: ExecutorProfile, merged: Merged) -> bool:
    flags, names = _key_settings(profile)
    settings, env = merged.settings, merged.env_map
    # (Loops, not any() of a generator: this runs on every plan, and each is two names. The
    # variables first: the merge moves every key flag's value into the key variable.)
    for n in names:
        if env.get(n):
            return True
    for f in flags:  # noqa: SIM110
        if f in settings:
            return True
    return False


# Both below are pure functions of a frozen profile, asked on every plan: each is worked out
# once per profile, not with two table lookups and a set a plan.
@functools.cache
def _flag_env(profile: ExecutorProfile, flag: str) -> tuple[str, ...]:
    """The variables the executor reads for `flag` (by the bundled table)."""
    known = profile.flags.lookup(flag)
    return known[0].env if known is not None else ()


@functools.cache
def _key_settings(profile: ExecutorProfile) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The merge keys of the key and key-file flags, and every variable that sets a key."""
    flags: list[str] = []
    names = [profile.key_env] if profile.key_env else []
    for name in (profile.key_flag, profile.key_file_flag):
        found = profile.flags.lookup(name) if name else None
        if found is not None:
            flags.append(found[0].key)
            names += [n for n in found[0].env if n not in names]
    return tuple(flags), tuple(names)


POOLED_BROKEN = "pooled-serving"
"""The code of the finding a plan carries when a layer undoes what a pooled member needs
(`pooled_findings`)."""


def pooled_findings(
    profile: ExecutorProfile, pooled: Pooled | None, m: Merged, model_ctx: int
) -> list[Finding]:
    """What the merge `m` of a pooled member (`pooled`) sets that breaks what it serves: a
    pooling its endpoint refuses, or a ubatch (or batch) below the context, so that an input
    longer than the ubatch is refused although the context holds it."""
    if pooled is None:
        return []
    found: list[Finding] = []
    where = dict(zip((it.key for it in m.items), m.item_layers, strict=True))
    pooling, setter = _value(profile, m, profile.pooling_flag)
    wanted = {"rank"} if pooled.pooling == "rank" else _EMBEDDING_POOLINGS
    if pooling and pooling not in wanted:
        endpoint = "/v1/rerank" if pooled.pooling == "rank" else "/v1/embeddings"
        found.append(
            Finding(
                severity="warning",
                code=POOLED_BROKEN,
                path=setter,
                token=profile.pooling_flag,
                message=(
                    f"{profile.pooling_flag} {pooling} on a {pooled.capability} member: "
                    f"{endpoint} refuses it (llama.cpp answers 400)"
                ),
                suggestion=f"{profile.pooling_flag} {pooled.pooling}",
            )
        )
    s = settings_of(profile, m.items, m.env)
    ctx = s.ctx or model_ctx
    ubatch = min(s.batch, s.ubatch)
    if ctx and ubatch < ctx:
        role = "ubatch" if s.ubatch <= s.batch else "batch"
        flag = profile.memory_flags.get(role, "")
        found.append(
            Finding(
                severity="warning",
                code=POOLED_BROKEN,
                path=where.get(flag, "env" if role in s.explicit else "default"),
                token=flag,
                message=(
                    f"a {pooled.capability} member computes each input in one ubatch: with "
                    f"ubatch {ubatch} and ctx {ctx}, an input over {ubatch} tokens is "
                    "refused (llama.cpp answers 500, 'too large to process')"
                ),
                suggestion=" ".join(
                    f"{profile.memory_flags[r]} {ctx}" for r in ("batch", "ubatch")
                ),
            )
        )
    return found


def _value(profile: ExecutorProfile, m: Merged, flag: str) -> tuple[str, str]:
    """The merged value of `flag` (its argv value, else its variable's; "" when unset) and
    the layer that set it."""
    if flag in m.settings:
        values = m.settings[flag]
        pairs = zip(m.items, m.item_layers, strict=True)
        layer = next((w for it, w in pairs if it.key == flag), "")
        return (values[0] if values else ""), layer
    known = profile.flags.lookup(flag)
    for name in known[0].env if known is not None else ():
        if name in m.env_map:
            return m.env_map[name], m.env_layers.get(name, name)
    return "", ""
