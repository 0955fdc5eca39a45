"""Issue 19 item 2: laws of the memory estimate over random model shapes and settings.

- more context never needs less memory;
- more slots never need less KV when each slot keeps its own cache (and the context divides
  into whole 256-cell slots: llama.cpp pads each slot's share up, so 4096 tokens over 3 slots
  take 4608 cells and over 4 slots 4096);
- a larger cache type never needs less;
- a layer moved to a device moves exactly its bytes.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from returns.result import Failure

from exedra_engine import Constraints, DoesNotFit, ModelInfo, ModelSpec, plan_launch
from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._core.executors.kinds import Kind
from exedra_engine._core.gguf.inventory import ModelInventory, TensorInfo
from exedra_engine._core.memory.decide import HOST_MARGIN
from exedra_engine._core.memory.estimate import estimate_memory
from exedra_engine._core.memory.kv import context_geometry, kv_bytes
from exedra_engine._core.memory.settings import read_settings
from exedra_engine._core.values import CPU, GPU, Device, ExecutorInfo, Hardware

CPU_HOST = Hardware(
    cpu=CPU(threads=4, ram=64 << 30, available=None),
    executors=(ExecutorInfo(kind=Kind.LLAMA, path="/x", backends=("cpu",)),),
)
GPU_HOST = Hardware(
    cpu=CPU(threads=4, ram=64 << 30),
    gpus=(GPU(card="card0", driver="amdgpu", vram=16 << 30, vram_free=12 << 30),),
    executors=(ExecutorInfo(kind=Kind.LLAMA, path="/x", backends=("cpu", "vulkan")),),
)
# The same device as the executor lists it (--list-devices), the kernel showing none.
LISTED_HOST = Hardware(
    cpu=CPU(threads=4, ram=64 << 30),
    executors=(
        ExecutorInfo(
            kind=Kind.LLAMA,
            path="/x",
            backends=("cpu", "vulkan"),
            devices=(Device(name="Vulkan0", description="d", total=16 << 30, free=12 << 30),),
        ),
    ),
)

# Cache types by bytes per element (block bytes / block elements), smallest first.
CACHE_ORDER = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "f16", "f32"]


@st.composite
def inventories(draw: st.DrawFn) -> ModelInventory:
    blocks = draw(st.integers(1, 24))
    heads = draw(st.sampled_from([1, 2, 4, 8, 16]))
    kv = draw(st.lists(st.sampled_from([0, 1, 2, heads]), min_size=blocks, max_size=blocks))
    window = draw(st.sampled_from([0, 0, 128, 512, 4096]))
    swa = draw(st.lists(st.booleans(), min_size=blocks, max_size=blocks)) if window else []
    recurrent = draw(st.booleans())
    tensors = [
        TensorInfo(name="token_embd.weight", type=0, shape=(64,), size=draw(st.integers(1, 10**8)))
    ]
    if draw(st.booleans()):
        tensors.append(
            TensorInfo(name="output.weight", type=0, shape=(64,), size=draw(st.integers(1, 10**8)))
        )
    for i in range(blocks):
        for part in ("attn_q", "ffn_up", "ffn_up_exps"):
            tensors.append(
                TensorInfo(
                    name=f"blk.{i}.{part}.weight",
                    type=0,
                    shape=(64,),
                    size=draw(st.integers(0, 10**7)),
                )
            )
    return ModelInventory(
        paths=("m.gguf",),
        sizes=(sum(t.size for t in tensors) + 4096,),
        architecture="x",
        tensors=tuple(tensors),
        blocks=blocks,
        context=draw(st.sampled_from([0, 2048, 32768, 131072])),
        embedding=heads * draw(st.sampled_from([32, 64, 128])),
        vocab=draw(st.integers(1, 300_000)),
        feed_forward=(draw(st.integers(0, 20_000)),) * blocks,
        head_count=(heads,) * blocks,
        head_count_kv=tuple(kv),
        key_length=draw(st.sampled_from([0, 64, 128, 256])),
        value_length=draw(st.sampled_from([0, 64, 128, 256])),
        sliding_window=window,
        swa_layers=tuple(swa) if window else (False,) * blocks,
        ssm_conv_kernel=4 if recurrent else 0,
        ssm_inner_size=256 if recurrent else 0,
        ssm_state_size=16 if recurrent else 0,
        recurrent_layers=tuple(recurrent and n == 0 for n in kv),
    )


flags = st.lists(
    st.sampled_from(
        [
            ["-fa", "off"],
            ["-fa", "on"],
            ["-ub", "64"],
            ["-b", "256"],
            ["--swa-full"],
            ["-kvu"],
            ["-ctk", "q8_0"],
            ["--cache-ram", "0"],
            ["--cache-ram", "-1"],
            ["-nkvo"],
        ]
    ),
    max_size=4,
).map(lambda xs: [t for x in xs for t in x])


@given(
    inventories(),
    flags,
    st.integers(1, 200_000),
    st.integers(1, 200_000),
    st.sampled_from([CPU_HOST, GPU_HOST, LISTED_HOST]),
)
def test_monotone_in_ctx(
    inv: ModelInventory, extra: list[str], a: int, b: int, hw: Hardware
) -> None:
    lo, hi = sorted((a, b))
    m_lo = estimate_memory(inv, ["-c", str(lo), *extra], hw, LLAMA)
    m_hi = estimate_memory(inv, ["-c", str(hi), *extra], hw, LLAMA)
    assert m_lo.ctx <= m_hi.ctx
    for x, y in zip((m_lo.host, *m_lo.devices), (m_hi.host, *m_hi.devices), strict=True):
        assert x.total <= y.total
        assert x.reserved <= y.reserved
        assert x.parts.kv <= y.parts.kv


@given(inventories(), flags, st.integers(1, 8), st.integers(1, 8), st.integers(1, 6))
def test_monotone_in_slots_when_not_unified(
    inv: ModelInventory, extra: list[str], a: int, b: int, pages: int
) -> None:
    extra = [t for t in extra if t != "-kvu"]
    lo, hi = sorted((a, b))
    ctx = 256 * 840 * pages  # 840 = lcm(1..8): every slot count gets whole 256-cell slots
    kv = []
    for n in (lo, hi):
        s = read_settings(LLAMA, ["-c", str(ctx), "-np", str(n), *extra])
        kv.append(sum(kv_bytes(inv, s, context_geometry(inv, s))))
    assert kv[0] <= kv[1]


@given(
    inventories(),
    st.integers(1, 100_000),
    st.sampled_from(CACHE_ORDER),
    st.sampled_from(CACHE_ORDER),
)
def test_monotone_in_cache_type(inv: ModelInventory, ctx: int, a: str, b: str) -> None:
    small, big = sorted((a, b), key=CACHE_ORDER.index)
    got = [
        estimate_memory(inv, ["-c", str(ctx), "-ctk", t, "-ctv", t], CPU_HOST, LLAMA).host
        for t in (small, big)
    ]
    assert got[0].parts.kv <= got[1].parts.kv
    assert got[0].total <= got[1].total


@given(inventories(), flags, st.sampled_from([0, 512, 4096, 32768]))
def test_a_device_the_executor_lists_is_planned_as_the_same_device_in_sysfs(
    inv: ModelInventory, extra: list[str], ctx: int
) -> None:
    args = ["-c", str(ctx), *extra] if ctx else extra
    assert estimate_memory(inv, args, LISTED_HOST, LLAMA) == estimate_memory(
        inv, args, GPU_HOST, LLAMA
    )


@given(inventories(), st.data())
def test_a_layer_moved_to_a_device_moves_its_bytes(
    inv: ModelInventory, data: st.DataObject
) -> None:
    n = data.draw(st.integers(0, inv.blocks))
    base = ["-c", "4096", "-np", "1", "-fa", "on"]
    before = estimate_memory(inv, [*base, "-ngl", str(n)], GPU_HOST, LLAMA)
    after = estimate_memory(inv, [*base, "-ngl", str(n + 1)], GPU_HOST, LLAMA)
    # -ngl N offloads the output layer, then the last N - 1 blocks
    moved = inv.blocks - n
    s = read_settings(LLAMA, base)
    if n == 0:
        w = sum(t.size for t in inv.tensors if t.name.startswith(("output.", "output_norm.")))
        kv = 0
    else:
        w = sum(t.size for t in inv.tensors if t.layer == moved)
        kv = kv_bytes(inv, s, context_geometry(inv, s))[moved]
    assert before.host.parts.weights - after.host.parts.weights == w
    assert after.devices[0].parts.weights - before.devices[0].parts.weights == w
    assert before.host.parts.kv - after.host.parts.kv == kv
    assert after.devices[0].parts.kv - before.devices[0].parts.kv == kv


@given(
    inventories(),
    flags,
    st.sampled_from([0, 0, 512, 4096, 32768, 10**6, 10**8]),
    st.integers(64, 64 << 10),
)
def test_a_plan_never_exceeds_its_own_figures(
    inv: ModelInventory, extra: list[str], ctx: int, available_mib: int
) -> None:
    # Issue 19 item 4: whatever the layers ask, the plan is refused or fits the budget
    # (usable memory less the margin), and an unset context is never planned below 4096
    # tokens unless the model's own is smaller.
    hw = Hardware(
        cpu=CPU(threads=4, ram=available_mib << 21, available=available_mib << 20),
        executors=CPU_HOST.executors,
    )
    spec = ModelSpec(id="m", path="/m.gguf", kind=Kind.LLAMA)
    info = ModelInfo(path="/m.gguf", size=inv.size, architecture="x", blocks=inv.blocks)
    got = plan_launch(
        spec, hw, Constraints(ctx=ctx, extra_args=tuple(extra)), model=info, inventory=inv
    )
    if isinstance(got, Failure):
        assert isinstance(got.failure(), DoesNotFit), got
        return
    plan = got.unwrap()
    assert plan.memory is not None
    usable = (available_mib << 20) - (available_mib << 20) * HOST_MARGIN // 100
    assert plan.memory.host.total <= usable
    if not ctx:
        own = inv.context or 4096
        assert plan.memory.ctx >= min(own, 4096)
