"""Findings about what the merged layers ask of the model itself, judged by its header: a
context above the one it was trained for, chat served from a model with no chat template.
Pure.

These sit beside the layers' own findings (`exedra_engine._core.config.check`): the executor
runs such a plan, but not as the user meant it.

====================  ========  ===========================================================
code                  severity  what
====================  ========  ===========================================================
ctx-above-trained     warning   a context a slot may fill that is longer than the model's
                                trained context (``{arch}.context_length``)
no-chat-template      note      chat served from a model whose header has no
                                ``tokenizer.chat_template``: the executor formats it in its
                                fallback (llama-server: ChatML), which a model not trained on
                                it answers with its markers or nonsense
====================  ========  ===========================================================
"""

from __future__ import annotations

from exedra_engine._core.config.findings import Finding
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.gguf.inventory import ModelInventory
from exedra_engine._core.gguf.labels import CHAT_TEMPLATE
from exedra_engine._core.memory.kv import context_geometry
from exedra_engine._core.memory.settings import settings_of
from exedra_engine._core.plan.layers import Merged
from exedra_engine._core.values import ModelInfo, ModelSpec

MODEL_CODES = frozenset({"ctx-above-trained", "no-chat-template"})
"""The codes of this module's findings: judged by the model's header, not a flag table."""


def model_findings(
    profile: ExecutorProfile,
    spec: ModelSpec,
    m: Merged,
    model: ModelInfo | None,
    inventory: ModelInventory | None,
) -> tuple[Finding, ...]:
    """What `m` asks of `model` that it was not made for (see the module's table)."""
    found: list[Finding] = []
    if model is not None and inventory is not None:
        found.extend(_ctx_above_trained(profile, m, model, inventory))
    if model is not None:
        found.extend(_no_chat_template(profile, spec, m, model))
    return tuple(found)


_CHAT_CAPABILITIES = frozenset({"llm", "vlm"})


def _no_chat_template(
    profile: ExecutorProfile, spec: ModelSpec, m: Merged, model: ModelInfo
) -> list[Finding]:
    if model.chat_template != 0 or not profile.chat_template_flags:
        return []  # UNSET: the header was not read for it
    if spec.capabilities and not _CHAT_CAPABILITIES & set(spec.capabilities):
        return []  # an embeddings or rerank model: no chat is asked of it
    keys = {it.key for it in m.items if not it.negated}
    for name in m.env_layers:
        f = profile.flags.flag_for_env(name)
        if f is not None:
            keys.add(f.key)
    if keys & (profile.chat_template_flags | profile.no_chat_flags):
        return []
    flag = min(profile.chat_template_flags)
    said = " (its header says it is a base model)" if model.tuning == "base" else ""
    completions = (
        f"send a prompt to continue to {profile.completions_path} instead, or "
        if profile.completions_path
        else ""
    )
    return [
        Finding(
            severity="note",
            code="no-chat-template",
            path="model",
            token=CHAT_TEMPLATE,
            message=(
                f"the model has no chat template ({CHAT_TEMPLATE}){said}: {profile.binary} "
                f"formats chat requests in {profile.chat_fallback or 'its fallback'}, which a "
                "model not trained on it answers with stray markers or nonsense; "
                f"{completions}name the template the model was trained on with {flag} "
                f"(--arg={flag} --arg=NAME, or a config layer)"
            ),
        )
    ]


def _ctx_above_trained(
    profile: ExecutorProfile, m: Merged, model: ModelInfo, inv: ModelInventory
) -> list[Finding]:
    flag = profile.memory_flags.get("ctx")
    if not flag or model.context <= 0:
        return []
    s = settings_of(profile, m.items, m.env)
    if s.ctx <= 0:  # the executor's default is the model's own context
        return []
    # What one slot may fill: llama.cpp warns of "training context overflow" past it.
    per_slot = context_geometry(inv, s).ctx_seq
    if per_slot <= model.context:
        return []
    where, token = _set_by(profile, m, flag)
    slot = "" if per_slot == s.ctx else f" ({per_slot} a slot)"
    return [
        Finding(
            severity="warning",
            code="ctx-above-trained",
            path=where,
            token=token,
            message=(
                f"a context of {s.ctx}{slot} is above the {model.context} tokens the model "
                f"was trained for ({model.architecture}.context_length): {profile.binary} "
                "runs it, but answers degrade past the trained length, and the KV cache is "
                f"sized for all of it; --ctx {model.context} or less (a group member's ctx:) stays "
                "within it"
            ),
        )
    ]


def _set_by(profile: ExecutorProfile, m: Merged, flag: str) -> tuple[str, str]:
    """Which layer set the context, and the tokens it wrote."""
    for item, layer in zip(reversed(m.items), reversed(m.item_layers), strict=True):
        if item.key == flag:
            # The engine layer writes the context it was asked for: the caller's --ctx, or
            # a group member's ``ctx:``, not args anyone wrote.
            where = "ctx" if layer == "engine" else f"{layer} args"
            return where, " ".join(item.tokens)
    for name, layer in m.env_layers.items():
        f = profile.flags.flag_for_env(name)
        if f is not None and f.key == flag:
            return f"{layer} env", name
    return "plan", flag
