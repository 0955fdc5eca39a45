"""The memory arithmetic as people read it: sizes, a figure's parts, and the ``--explain``
lines of a `MemoryPlan`. Pure."""

from __future__ import annotations

from exedra_engine._core.memory.plan import MemoryParts, MemoryPlan
from exedra_engine._core.memory.settings import MIB


def size_text(n: int) -> str:
    """Bytes as people read them: ``231 MiB``, ``3.2 GiB``."""
    if n >= 10 * (1 << 30):
        return f"{n / (1 << 30):.0f} GiB"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    return f"{-(-n // MIB)} MiB"


def parts_text(p: MemoryParts) -> str:
    """``weights 231 MiB + kv 49 MiB + compute 132 MiB + prompt cache 512 MiB``."""
    named = (
        ("weights", p.weights),
        ("kv", p.kv),
        ("compute", p.compute),
        ("prompt cache", p.prompt_cache),
        ("other", p.other),
    )
    return " + ".join(f"{name} {size_text(v)}" for name, v in named if v) or "0 MiB"


def biggest_part(p: MemoryParts) -> tuple[str, int]:
    """The largest part's name and size."""
    named = (
        ("weights", p.weights),
        ("KV cache", p.kv),
        ("compute buffers", p.compute),
        ("prompt cache", p.prompt_cache),
        ("other", p.other),
    )
    return max(named, key=lambda kv: kv[1])


def explain_memory(plan: MemoryPlan, host_usable: tuple[int, str] | None = None) -> tuple[str, ...]:
    """The arithmetic, one line a place: ``ctx 16384: Host: weights 231 MiB + ... = 924
    MiB <= 3.2 GiB usable``. `host_usable` is the host budget the planner judged by and how
    it was found (default: the host's `available`)."""
    lines = []
    for place_ in (plan.host, *plan.devices):
        host = place_.name == "Host"
        judged = place_.parts if host else place_.reserved_parts
        # The host's resident figure is always the estimate's: the engine measures what it
        # reserves. What llama.cpp reserves on the host is not shown beside it: it counts
        # pages never touched (a full batch of logits) and no fit is judged by it.
        figure = "resident, estimated" if host else f"reserved, {plan.source}"
        line = (
            f"ctx {plan.ctx}: {place_.name} ({figure}): {parts_text(judged)}"
            f" = {size_text(judged.total)}"
        )
        if place_.name == "Host" and host_usable is not None:
            op = "<=" if judged.total <= host_usable[0] else ">"
            line += f" {op} {size_text(host_usable[0])} usable ({host_usable[1]})"
        elif place_.available is not None:
            op = "<=" if judged.total <= place_.available else ">"
            what = "usable" if place_.name == "Host" else "free"
            line += f" {op} {size_text(place_.available)} {what}"
        lines.append(line)
        if host and plan.source == "measured":
            lines.append(
                f"ctx {plan.ctx}: Host (reserved, measured): "
                f"{parts_text(place_.reserved_parts)} = {size_text(place_.reserved)}"
            )
    return tuple(lines)
