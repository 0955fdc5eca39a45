"""What the planner decides from the memory estimate: the largest context that fits when the
model's own does not, the host prompt cache (``--cache-ram``) sized to what is left, the
measurement that replaces the estimate's reserved figures, and `DoesNotFit` when a setting a
layer chose cannot fit. Pure."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from msgspec.structs import replace

from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.gguf.inventory import ModelInventory
from exedra_engine._core.host.machine import Hardware
from exedra_engine._core.memory.estimate import (
    estimate_from_settings,
    with_measurement,
)
from exedra_engine._core.memory.explain import biggest_part, explain_memory, parts_text, size_text
from exedra_engine._core.memory.fit_params import measurement_of
from exedra_engine._core.memory.kv import CTX_PAD, FALLBACK_CTX
from exedra_engine._core.memory.placement import bytes_by_layer, device_names
from exedra_engine._core.memory.plan import MemoryPlan, PlaceMemory
from exedra_engine._core.memory.settings import (
    DEFAULT_CACHE_RAM_MIB,
    MIB,
    MemorySettings,
    fitter_off,
    int_or,
)
from exedra_engine._core.struct import Value
from exedra_engine.errors import DoesNotFit

PROMPT_CACHE_STATES: Final = 4
"""How many planned KV caches the host prompt cache the planner sizes can hold: one per
default slot (``-np auto`` is 4)."""
PROMPT_CACHE_FLOOR_MIB: Final = 256
"""The smallest prompt cache the planner sizes, MiB."""
HOST_MARGIN: Final = 10
"""Percent of the host's usable memory kept out of every plan: the resident figure is an
estimate, and the process is not alone (page cache, the kernel, a sidecar)."""


class MemoryDecision(Value, frozen=True, kw_only=True):
    """What the planner adds to the engine layer for memory, the plan's memory, and why."""

    memory: MemoryPlan
    engine_args: tuple[str, ...] = ()
    """``--ctx-size N`` when the model's own context does not fit, ``--cache-ram N`` sized
    to what is left; nothing a layer set itself."""
    notes: tuple[str, ...] = ()
    """The arithmetic and the decisions, for ``--explain``."""


def usable_host(hw: Hardware) -> tuple[int | None, str]:
    """The host memory a plan may fill (`HOST_MARGIN` kept out), and how it was found."""
    if hw.cpu.available is not None:
        total, what = hw.cpu.available, "available"
    elif hw.cpu.ram:
        total, what = hw.cpu.ram, "total, free memory unknown"
    else:
        return None, "host memory unknown: not judged"
    margin = total * HOST_MARGIN // 100
    return total - margin, f"{size_text(total)} {what} - {HOST_MARGIN}% margin"


def decide_memory(
    inventory: ModelInventory,
    items: Sequence[Item],
    env: Sequence[str],
    hardware: Hardware,
    profile: ExecutorProfile,
    *,
    settings: MemorySettings,
    mmproj: ModelInventory | None = None,
    draft: ModelInventory | None = None,
    budget: tuple[int, str] | None = None,
) -> MemoryDecision:
    """The plan's memory for its merged argv and env, raising `DoesNotFit` when a setting a
    layer chose cannot fit; an unset context that does not fit becomes the largest that
    does (never below 4096 tokens unless the model's own is smaller), and an unset
    ``--cache-ram`` gets what is left of the budget (at most its default). `items` are the
    merged argv as the profile's table reads it (the merge's), and `settings` their
    `settings_of`. `budget` replaces the host's usable memory and its
    explanation (`usable_host`): a group member's share (`exedra_engine._core.group`)."""
    return _Decider(
        inventory,
        items,
        env=env,
        hw=hardware,
        profile=profile,
        sides=(mmproj, draft),
        settings=settings,
        budget=budget,
    ).run()


def settings_with(
    profile: ExecutorProfile, s: MemorySettings, extra: Sequence[str]
) -> MemorySettings:
    """`settings_of` an argv with `extra` (a context and a prompt cache, flags that no
    layer set, as flag-value pairs) after it, from `s`, its settings already read: a flag
    added last wins over any earlier one and over its variable."""
    if not extra:
        return s
    found = dict(zip(extra[::2], extra[1::2], strict=True))
    ctx = found.get(profile.memory_flags["ctx"])
    cache = found.get(profile.memory_flags["cache_ram"])
    roles = {role for role, flag in profile.memory_flags.items() if flag in found}
    return replace(
        s,
        ctx=s.ctx if ctx is None else int_or(ctx, 0),
        cache_ram_mib=(s.cache_ram_mib if cache is None else int_or(cache, DEFAULT_CACHE_RAM_MIB)),
        explicit=s.explicit | roles,
    )


class _Decider:
    def __init__(
        self,
        inv: ModelInventory,
        items: Sequence[Item],
        *,
        env: Sequence[str],
        hw: Hardware,
        profile: ExecutorProfile,
        sides: tuple[ModelInventory | None, ModelInventory | None],
        settings: MemorySettings,
        budget: tuple[int, str] | None = None,
    ) -> None:
        self.inv, self.items, self.env, self.hw, self.p, self.sides = (
            inv,
            items,
            env,
            hw,
            profile,
            sides,
        )
        self.s = settings
        # Every estimate places the same weights: by layer once (needed with devices only).
        self.by_layer = bytes_by_layer(inv) if device_names(hw, profile.kind) else None
        self.usable, self.how = budget if budget is not None else usable_host(hw)
        self.fixed_ctx = "ctx" in self.s.explicit and self.s.ctx > 0
        self.fixed_cache = "cache_ram" in self.s.explicit
        self.judge_devices = bool(fitter_off(self.s))
        # The context search, the cache sizing and the final figure ask for the same argv
        # more than once; an estimate costs ~0.5 ms.
        self.seen: dict[tuple[str, ...], MemoryPlan] = {}

    def est(self, extra: Sequence[str]) -> MemoryPlan:
        key = tuple(extra)
        if key not in self.seen:
            mmproj, draft = self.sides
            self.seen[key] = estimate_from_settings(
                self.inv,
                self.settings(extra),
                self.hw,
                self.p,
                ctx=None,
                mmproj=mmproj,
                draft=draft,
                by_layer=self.by_layer,
            )
        return self.seen[key]

    def settings(self, extra: Sequence[str]) -> MemorySettings:
        return settings_with(self.p, self.s, extra)

    def flags(self, ctx: int | None, cache_mib: int | None) -> tuple[str, ...]:
        out: tuple[str, ...] = ()
        if ctx is not None:
            out += (self.p.memory_flags["ctx"], str(ctx))
        if cache_mib is not None and not self.fixed_cache:
            out += (self.p.memory_flags["cache_ram"], str(cache_mib))
        return out

    def overflow(self, m: MemoryPlan) -> PlaceMemory | None:
        if self.usable is not None and m.host.total > self.usable:
            return m.host
        for d in m.devices if self.judge_devices else ():
            if d.available is not None and d.reserved > d.available:
                return d
        return None

    def refuse(
        self, m: MemoryPlan, where: PlaceMemory, extra: Sequence[str], what: str = ""
    ) -> DoesNotFit:
        """`DoesNotFit` for `m` (the estimate of the argv with `extra` after it), naming
        the largest context that fits and what a q8_0 KV cache would save."""
        if not what:
            what = f"ctx {m.ctx}" if self.fixed_ctx else f"the model's context {m.ctx}"
        return _does_not_fit(m, where, self.usable, self.how, what, hints=self.hints(m, extra))

    def hints(self, m: MemoryPlan, extra: Sequence[str]) -> str:
        """What would fit instead: the largest context (with the prompt cache a layer set, or
        none), and the KV cache's size at q8_0, which llama.cpp stores in about half of f16."""
        out = []
        ctx_flag = self.p.memory_flags.get("ctx")
        if ctx_flag:
            ctx = _largest_fitting(
                self.inv, lambda c: self.overflow(self.est(self.flags(c, 0))) is None
            )
            if ctx is not None and ctx < m.ctx:
                what = (
                    f"the model's trained context, {ctx}, fits"
                    if ctx == self.inv.context
                    else f"the largest context that fits is {ctx}"
                )
                out.append(f"{what} (--ctx {ctx})")
        q8 = self.q8_kv(extra)
        if q8 is not None:
            saved = _kv(m) - _kv(q8)
            if saved >= MIB:
                fits = "and fit" if self.overflow(q8) is None else "and still not fit"
                out.append(
                    f"a q8_0 KV cache (-ctk q8_0 -ctv q8_0) would save {size_text(saved)} "
                    f"{fits} at ctx {m.ctx}"
                )
        return "; ".join(out)

    def q8_kv(self, extra: Sequence[str]) -> MemoryPlan | None:
        """The estimate with both caches q8_0, when the profile reads the cache types."""
        if not {"cache_type_k", "cache_type_v"} <= self.p.memory_flags.keys():
            return None
        mmproj, draft = self.sides
        return estimate_from_settings(
            self.inv,
            replace(self.settings(extra), cache_type_k="q8_0", cache_type_v="q8_0"),
            self.hw,
            self.p,
            ctx=None,
            mmproj=mmproj,
            draft=draft,
            by_layer=self.by_layer,
        )

    def choose_ctx(self, notes: list[str]) -> int | None:
        """None when the argv's context fits; else the largest that does."""
        first = self.est(self.flags(None, 0))
        bad = self.overflow(first)
        if bad is None:
            return None
        if self.fixed_ctx or self.usable is None or bad.name != "Host":
            raise self.refuse(first, bad, self.flags(None, 0))
        ctx = _largest_fitting(
            self.inv, lambda c: self.overflow(self.est(self.flags(c, 0))) is None
        )
        if ctx is None:
            extra = self.flags(min(FALLBACK_CTX, self.inv.context or FALLBACK_CTX), 0)
            m = self.est(extra)
            raise self.refuse(
                m, self.overflow(m) or m.host, extra, f"the smallest context planned, {m.ctx},"
            )
        notes.append(
            f"the model's context {self.inv.context or first.ctx} does not fit "
            f"{size_text(self.usable)} usable: planned ctx {ctx}, the largest that fits"
        )
        return ctx

    def run(self) -> MemoryDecision:
        notes: list[str] = []
        ctx = self.choose_ctx(notes)
        cache_mib = None if self.fixed_cache else self.cache_size(ctx, notes)
        engine = self.flags(ctx, cache_mib)
        final = self.est(engine)
        measured = None
        if self.hw.measurements:
            # The merge's items, and those of the flags decided here (no layer set them).
            items = (*self.items, *self.p.flags.split_items(engine, "memory flags"))
            measured = measurement_of(
                self.hw.measurements, self.p, self.inv.paths[0], items, self.env
            )
        if measured is not None:
            final = with_measurement(final, measured)
            bad = self.overflow(final)
            if bad is not None:
                raise self.refuse(final, bad, engine)
        return MemoryDecision(memory=final, engine_args=engine, notes=(*self.lines(final), *notes))

    def cache_size(self, ctx: int | None, notes: list[str]) -> int:
        """MiB of host prompt cache: room for `PROMPT_CACHE_STATES` copies of the planned
        KV cache (at least `PROMPT_CACHE_FLOOR_MIB`), never more than the default nor than
        what the budget leaves. The executor's default, 8 GiB a process whatever the model,
        would make a 300 MiB model's cgroup limit 9 GiB, and several executors on one host
        each claim it."""
        base = self.est(self.flags(ctx, 0))
        kv = base.host.parts.kv + sum(d.parts.kv for d in base.devices)
        share = max(PROMPT_CACHE_FLOOR_MIB, -(-PROMPT_CACHE_STATES * kv // MIB))
        cache = min(DEFAULT_CACHE_RAM_MIB, share)
        why = (
            f"{PROMPT_CACHE_STATES} x the KV cache ({size_text(kv)}), "
            f"at least {PROMPT_CACHE_FLOOR_MIB} MiB"
            if cache == share
            else f"{self.p.binary}'s default, less than {PROMPT_CACHE_STATES} x the KV cache "
            f"({size_text(kv)})"
        )
        if self.usable is not None:
            left = max((self.usable - base.host.total) // MIB, 0)
            if left < cache:
                cache, why = left, "what the budget leaves"
        flag = self.p.memory_flags["cache_ram"]
        notes.append(
            f"{flag} {cache}: the host prompt cache, which fills with use up to its size, "
            f"gets {why} ({self.p.binary}'s default is "
            f"{DEFAULT_CACHE_RAM_MIB} MiB a process; a layer that sets {flag} decides)"
        )
        return cache

    def lines(self, m: MemoryPlan) -> list[str]:
        budget = (self.usable, self.how) if self.usable is not None else None
        lines = list(explain_memory(m, budget))
        if budget is None:
            lines.append(self.how)
        for i, d in enumerate(self.hw.offload_devices(self.p.kind)[: len(m.devices)]):
            if d.free is None and d.total:
                lines.append(f"{m.devices[i].name}: free memory unknown, judged by its total")
        if self.judge_devices and m.devices:
            lines.append(
                "devices judged by their free memory: "
                + ", ".join(fitter_off(self.s))
                + " switch llama.cpp's own fitter off"
            )
        return lines


def _largest_fitting(inv: ModelInventory, fits: Callable[[int], bool]) -> int | None:
    """The largest context, in whole 256-token pages, from the model's own (or 4096) down
    to 4096 (or the model's own when smaller) for which `fits` holds; None if none does."""
    top = inv.context or FALLBACK_CTX
    floor = min(FALLBACK_CTX, top)
    if not fits(floor):
        return None
    lo, hi = floor // CTX_PAD, max(top // CTX_PAD, floor // CTX_PAD)
    while lo < hi:  # memory grows with the context: bisect over pages
        mid = (lo + hi + 1) // 2
        if fits(mid * CTX_PAD):
            lo = mid
        else:
            hi = mid - 1
    return max(lo * CTX_PAD, floor)


def _kv(m: MemoryPlan) -> int:
    return m.host.parts.kv + sum(d.parts.kv for d in m.devices)


def _does_not_fit(
    m: MemoryPlan, where: PlaceMemory, usable: int | None, how: str, what: str, *, hints: str = ""
) -> DoesNotFit:
    host = where.name == "Host"
    parts = where.parts if host else where.reserved_parts
    need = parts.total
    have = usable if host else where.available
    name, size = biggest_part(parts)
    place = "host memory" if host else f"{where.name}'s free memory"
    there = f"{size_text(have or 0)} usable ({how})" if host else f"{size_text(have or 0)} free"
    return DoesNotFit(
        f"{what} needs {size_text(need)} of {place} but {there}; the biggest part is "
        f"the {name}, {size_text(size)} ({parts_text(parts)})"
        + (f". Instead: {hints}" if hints else "")
    )
