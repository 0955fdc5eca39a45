"""Inventories of the measured models (docs/explanation.md, "Memory"), built as values so the
estimate's tests need no file: their shapes are the real models' headers."""

from __future__ import annotations

from exedra_engine._core.executors.kinds import Kind
from exedra_engine._core.gguf.inventory import ModelInventory, TensorInfo
from exedra_engine._core.values import CPU, GPU, ExecutorInfo, Hardware, ModelInfo


def _tensors(blocks: int, per_block: int, embd: int, head: int) -> tuple[TensorInfo, ...]:
    out = [TensorInfo(name="token_embd.weight", type=8, shape=(256,), size=embd)]
    if head:
        out.append(TensorInfo(name="output.weight", type=8, shape=(256,), size=head))
    out.append(TensorInfo(name="output_norm.weight", type=0, shape=(640,), size=2560))
    for i in range(blocks):
        out.append(
            TensorInfo(name=f"blk.{i}.attn_q.weight", type=12, shape=(256,), size=per_block // 2)
        )
        out.append(
            TensorInfo(
                name=f"blk.{i}.ffn_up.weight",
                type=12,
                shape=(256,),
                size=per_block - per_block // 2,
            )
        )
    return tuple(out)


def model_info(inv: ModelInventory, path: str = "/m/gemma.gguf") -> ModelInfo:
    """The header facts (`ModelInfo`) a file of `inv`'s shape at `path` gives."""
    return ModelInfo(
        path=path,
        size=inv.size,
        architecture=inv.architecture,
        blocks=inv.blocks,
        context=inv.context,
    )


def gemma3_270m() -> ModelInventory:
    """Gemma 3 270M Q4_K_M's shape: 18 blocks, 1 KV head x 256, a 512-token window on 5 of
    every 6 layers, 262,144 tokens; ~222 MiB of weights, the tied embedding the largest."""
    b = 18
    return ModelInventory(
        paths=("gemma-3-270m-q4_k_m.gguf",),
        sizes=(253_000_000,),
        architecture="gemma3",
        blocks=b,
        context=32768,
        embedding=640,
        vocab=262144,
        feed_forward=(2048,) * b,
        head_count=(4,) * b,
        head_count_kv=(1,) * b,
        key_length=256,
        value_length=256,
        sliding_window=512,
        swa_layers=tuple(i % 6 < 5 for i in range(b)),
        recurrent_layers=(False,) * b,
        tensors=_tensors(b, 3_300_000, 173_000_000, 0),
    )


def llama_135m() -> ModelInventory:
    """The measured 135M llama model's shape: 30 blocks, 3 KV heads x 64, 49,152 tokens."""
    b = 30
    return ModelInventory(
        paths=("llama-135m-q4_1.gguf",),
        sizes=(98_000_000,),
        architecture="llama",
        blocks=b,
        context=8192,
        embedding=576,
        vocab=49152,
        feed_forward=(1536,) * b,
        head_count=(9,) * b,
        head_count_kv=(3,) * b,
        key_length=64,
        value_length=64,
        swa_layers=(False,) * b,
        recurrent_layers=(False,) * b,
        tensors=_tensors(b, 2_100_000, 33_000_000, 0),
    )


def cpu_host(ram: int = 24 << 30, available: int | None = 20 << 30) -> Hardware:
    return Hardware(
        cpu=CPU(threads=2, ram=ram, available=available),
        executors=(ExecutorInfo(kind=Kind.LLAMA, path="/bin/llama-server", backends=("cpu",)),),
    )


def gpu_host(*free: int) -> Hardware:
    return Hardware(
        cpu=CPU(threads=8, ram=64 << 30, available=60 << 30),
        gpus=tuple(
            GPU(card=f"card{i}", driver="amdgpu", vram=f, vram_free=f) for i, f in enumerate(free)
        ),
        executors=(
            ExecutorInfo(kind=Kind.LLAMA, path="/bin/llama-server", backends=("cpu", "vulkan")),
        ),
    )
