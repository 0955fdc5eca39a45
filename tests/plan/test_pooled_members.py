"""Members planned for what they serve: an embeddings or rerank member gets its pooling, a
context for its inputs, one ubatch that holds that context and no prompt cache, in the engine
layer (so any layer above wins, and a finding says what it breaks); and members that map the
same model file count its weights once in the group's budget."""

from __future__ import annotations

import msgspec
import pytest

from exedra_engine import (
    Constraints,
    DoesNotFit,
    GroupMember,
    Kind,
    MemberFacts,
    ModelInfo,
    ModelInventory,
    ModelSpec,
    explain_group,
    explain_launch,
    plan_group,
)
from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._core.memory.estimate import pooled_logits_bytes
from exedra_engine._core.memory.settings import read_settings
from exedra_engine._core.plan.engine_args import POOLED_BROKEN, POOLED_CTX, POOLED_DECODER_CTX
from exedra_engine._core.plan.explained import Explained
from tests.memory_models import cpu_host, gemma3_270m, llama_135m, model_info

MIB = 1 << 20


def spec(*caps: str, path: str = "/m/gemma.gguf", mid: str = "embed") -> ModelSpec:
    return ModelSpec(id=mid, path=path, kind=Kind.LLAMA, capabilities=caps)


def info(inv: ModelInventory, path: str = "/m/gemma.gguf") -> ModelInfo:
    return model_info(inv, path)


def explained(
    s: ModelSpec, c: Constraints | None = None, inv: ModelInventory | None = None
) -> Explained:
    inv = inv or gemma3_270m()
    c = c or Constraints()
    return explain_launch(s, cpu_host(), c, model=info(inv), inventory=inv).unwrap()


def value(args: tuple[str, ...], flag: str) -> str:
    """The last value of `flag` in `args` (what llama-server reads)."""
    at = max(i for i, a in enumerate(args) if a == flag)
    return args[at + 1]


def test_an_embeddings_member_gets_mean_pooling_one_ubatch_for_its_context_and_no_cache() -> None:
    e = explained(spec("embeddings"))
    args = e.plan.args
    assert "--embeddings" in args
    assert value(args, "--pooling") == "mean"  # the header names none: llama.cpp would use none
    assert value(args, "--ctx-size") == str(POOLED_DECODER_CTX)  # not the model's 32768
    assert value(args, "--batch-size") == value(args, "--ubatch-size") == str(POOLED_DECODER_CTX)
    assert value(args, "--cache-ram") == "0"
    assert e.plan.memory is not None and e.plan.memory.host.parts.prompt_cache == 0
    assert any("embeddings: --pooling mean" in line for line in e.memory)
    assert not [f for f in e.findings if f.code == POOLED_BROKEN]


def test_a_decoders_pooled_input_holds_its_logits_and_an_encoder_gets_a_longer_context() -> None:
    inv = gemma3_270m()
    e = explained(spec("embeddings"))
    assert e.plan.memory is not None
    logits = pooled_logits_bytes(inv.vocab, POOLED_DECODER_CTX)
    assert e.plan.memory.host.parts.compute >= logits  # 4 GiB: what llama.cpp holds
    assert any("logits for every token" in line for line in e.memory)
    bert = msgspec.structs.replace(llama_135m(), architecture="bert", context=8192 * 4)
    enc = explained(spec("embeddings"), inv=bert)
    assert value(enc.plan.args, "--ctx-size") == str(POOLED_CTX)
    assert enc.plan.memory is not None and enc.plan.memory.host.parts.compute < logits // 8
    assert not any("logits for every token" in line for line in enc.memory)


def test_the_context_of_a_pooled_member_is_the_models_when_smaller_or_the_callers() -> None:
    small = msgspec.structs.replace(llama_135m(), context=2048)
    args = explained(spec("embeddings"), inv=small).plan.args
    assert value(args, "--ctx-size") == value(args, "--ubatch-size") == "2048"
    args = explained(spec("embeddings"), Constraints(ctx=1024)).plan.args
    assert value(args, "--ctx-size") == value(args, "--ubatch-size") == "1024"
    assert args.count("--ctx-size") == 1


def test_a_header_pooling_type_is_kept_and_rerank_gets_rank() -> None:
    cls = msgspec.structs.replace(gemma3_270m(), pooling=2)
    assert value(explained(spec("embeddings"), inv=cls).plan.args, "--pooling") == "cls"
    none = msgspec.structs.replace(gemma3_270m(), pooling=0)
    assert value(explained(spec("embeddings"), inv=none).plan.args, "--pooling") == "mean"
    rerank = explained(spec("rerank"), inv=cls).plan.args
    assert value(rerank, "--pooling") == "rank" and "--rerank" in rerank


def test_a_chat_member_gets_none_of_it() -> None:
    args = explained(spec("llm", mid="chat")).plan.args
    assert "--pooling" not in args and "--ubatch-size" not in args
    assert value(args, "--cache-ram") != "0"


def test_the_pooled_members_ubatch_sizes_its_compute_buffer() -> None:
    pooled = explained(spec("embeddings"), Constraints(ctx=4096)).plan.memory
    default_ub = explained(
        spec("embeddings"),
        Constraints(ctx=4096, extra_args=("--batch-size", "512", "--ubatch-size", "512")),
    ).plan.memory
    assert pooled is not None and default_ub is not None
    assert pooled.host.parts.compute > default_ub.host.parts.compute


def test_a_caller_ubatch_below_the_context_wins_and_is_a_finding() -> None:
    e = explained(spec("embeddings"), Constraints(extra_args=("-ub", "512")))
    assert read_settings(LLAMA, e.plan.args).ubatch == 512  # the caller's layer wins
    found = [f for f in e.findings if f.code == POOLED_BROKEN]
    assert len(found) == 1 and found[0].severity == "warning"
    assert found[0].path == "caller" and "over 512 tokens is refused" in found[0].message
    ctx = POOLED_DECODER_CTX
    assert found[0].suggestion == f"--batch-size {ctx} --ubatch-size {ctx}"


def test_pooling_none_on_an_embeddings_member_is_a_finding_naming_the_endpoint() -> None:
    e = explained(spec("embeddings"), Constraints(extra_args=("--pooling", "none")))
    assert value(e.plan.args, "--pooling") == "none"
    found = [f for f in e.findings if f.code == POOLED_BROKEN]
    assert len(found) == 1 and "/v1/embeddings refuses it" in found[0].message
    # The caller's variable wins over the engine's flag (it is dropped), and is named.
    env = explained(spec("rerank"), Constraints(extra_env=("LLAMA_ARG_POOLING=mean",)))
    assert "--pooling" not in env.plan.args
    found = [f for f in env.findings if f.code == POOLED_BROKEN]
    assert [(f.path, f.suggestion) for f in found] == [("caller", "--pooling rank")]
    assert "/v1/rerank refuses it" in found[0].message


def test_a_single_plan_and_a_group_member_are_planned_alike() -> None:
    alone = explained(spec("embeddings")).plan.args
    inv = gemma3_270m()
    members = (GroupMember(spec=spec("embeddings")),)
    g = plan_group(members, cpu_host(), facts=(MemberFacts(model=info(inv), inventory=inv),))
    assert g.unwrap().plans[0].args == alone


def test_the_plan_reads_back_as_the_settings_llama_server_gets() -> None:
    s = read_settings(LLAMA, explained(spec("embeddings")).plan.args)
    assert (s.ctx, s.batch, s.ubatch, s.cache_ram_mib) == (POOLED_DECODER_CTX,) * 3 + (0,)


# -- shared files --------------------------------------------------------------------------------


def _pair(path_b: str, *extra: str) -> tuple[tuple[GroupMember, ...], tuple[MemberFacts, ...]]:
    inv = gemma3_270m()
    other = msgspec.structs.replace(inv, paths=(path_b,))
    members = (
        GroupMember(spec=spec("llm", mid="chat", path=inv.paths[0]), constraints=Constraints()),
        GroupMember(
            spec=spec("embeddings", path=path_b),
            constraints=Constraints(extra_args=extra),
        ),
    )
    facts = (
        MemberFacts(model=info(inv, inv.paths[0]), inventory=inv),
        MemberFacts(model=info(other, path_b), inventory=other),
    )
    return members, facts


def test_two_members_of_one_file_count_its_weights_once() -> None:
    hw = cpu_host(available=8 << 30)
    same_m, same_f = _pair(gemma3_270m().paths[0])
    apart_m, apart_f = _pair("/m/copy.gguf")
    same = explain_group(same_m, hw, facts=same_f).unwrap().plan
    apart = explain_group(apart_m, hw, facts=apart_f).unwrap().plan
    weights = same.plans[1].memory.host.parts.weights  # type: ignore[union-attr]
    assert weights > 100 * MIB
    assert sum(s.memory for s in apart.shares) <= apart.budget
    assert sum(s.memory for s in same.shares) == pytest.approx(same.budget + weights, abs=2)
    assert any("map the same model file" in n and "counted once" in n for n in same.notes)
    assert not any("map the same model file" in n for n in apart.notes)


def test_a_group_that_fits_only_with_its_shared_weights_counted_once_is_planned() -> None:
    # Both members' memory fixed (a context, no prompt cache): each floor is its plan.
    fixed = ("--ctx-size", "4096", "--cache-ram", "0")
    m, f = _pair(gemma3_270m().paths[0], *fixed)
    m = (msgspec.structs.replace(m[0], constraints=Constraints(extra_args=fixed)), m[1])
    alone = [plan_group(m[i : i + 1], cpu_host(), facts=f[i : i + 1]).unwrap() for i in (0, 1)]
    floors = sum(g.plans[0].memory.host.total for g in alone)  # type: ignore[union-attr]
    weights = alone[1].plans[0].memory.host.parts.weights  # type: ignore[union-attr]
    # Between the floors counted once and twice: only the shared count fits.
    usable = floors - weights // 2
    hw = cpu_host(available=usable * 10 // 9 + 1)
    assert plan_group(m, hw, facts=f).value_or(None) is not None
    apart_m = tuple(
        msgspec.structs.replace(x, spec=msgspec.structs.replace(x.spec, path=f"/m/{i}.gguf"))
        for i, x in enumerate(m)
    )
    apart_f = tuple(
        msgspec.structs.replace(
            x, inventory=msgspec.structs.replace(x.inventory, paths=(f"/m/{i}.gguf",))
        )
        for i, x in enumerate(f)
    )
    got = plan_group(apart_m, hw, facts=apart_f)
    assert isinstance(got.failure(), DoesNotFit), got


def test_no_mmap_members_each_hold_their_own_copy() -> None:
    m, f = _pair(gemma3_270m().paths[0], "--no-mmap")
    g = plan_group(m, cpu_host(available=8 << 30), facts=f).unwrap()
    assert not any("map the same model file" in n for n in g.notes)
