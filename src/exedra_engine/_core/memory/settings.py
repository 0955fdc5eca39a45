"""The memory-relevant settings of a plan: read from its argv (the merge's items) and env
through the profile's flag table and its `memory_flags`, with llama-server's defaults filled
in. Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.struct import Value

MIB: Final = 1 << 20

ROLES: Final = (
    "ctx",
    "parallel",
    "kv_unified",
    "cache_type_k",
    "cache_type_v",
    "flash_attn",
    "batch",
    "ubatch",
    "gpu_layers",
    "tensor_split",
    "split_mode",
    "override_tensor",
    "cpu_moe",
    "n_cpu_moe",
    "mmproj",
    "draft",
    "cache_ram",
    "swa_full",
    "kv_offload",
    "embeddings",
)
"""What `ExecutorProfile.memory_flags` may name."""

# llama-server's defaults (common/common.h, tools/server/server.cpp).
DEFAULT_BATCH: Final = 2048
DEFAULT_UBATCH: Final = 512
DEFAULT_CACHE_RAM_MIB: Final = 8192


class MemorySettings(Value, frozen=True, kw_only=True):
    """The memory-relevant settings of a plan's argv, with the executor's defaults filled in."""

    ctx: int = 0
    """``-c``; 0: the model's training context."""
    parallel: int = -1
    """``-np``; -1: auto (`AUTO_PARALLEL` slots, unified KV)."""
    kv_unified: bool = False
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: str = "auto"
    batch: int = DEFAULT_BATCH
    ubatch: int = DEFAULT_UBATCH
    gpu_layers: int = -1
    """-1: auto (the executor's fitter places them), a count otherwise (``all``: 999)."""
    tensor_split: tuple[float, ...] = ()
    split_mode: str = "layer"
    override_tensor: tuple[tuple[str, str], ...] = ()
    """``-ot`` (pattern, buffer type) pairs, in order."""
    cpu_moe: bool = False
    n_cpu_moe: int = 0
    mmproj: str = ""
    draft: str = ""
    cache_ram_mib: int = DEFAULT_CACHE_RAM_MIB
    swa_full: bool = False
    kv_offload: bool = True
    embeddings: bool = False
    explicit: frozenset[str] = frozenset()
    """The roles the argv or env set."""


def read_settings(
    profile: ExecutorProfile, args: Sequence[str], env: Sequence[str] = ()
) -> MemorySettings:
    """The memory settings of an argv (and ``NAME=VALUE`` env) through the profile's table;
    a flag in argv wins over its variable, as the executor reads them."""
    return settings_of(profile, profile.flags.split_items(args, "plan args"), env)


def settings_of(
    profile: ExecutorProfile, items: Sequence[Item], env: Sequence[str] = ()
) -> MemorySettings:
    """`read_settings` of an argv the table has read already (`items`: a plan's reading,
    a merge's items)."""
    found = _Found(profile)
    found.take_items(items)
    found.read_env(env)
    return found.settings()


class _Found:
    """The memory roles an argv and env set: each one's values, whether it was negated, and
    every value of the repeatable ``-ot``."""

    def __init__(self, profile: ExecutorProfile) -> None:
        self.table = profile.flags
        self.role_of = {key: role for role, key in profile.memory_flags.items()}
        self.found: dict[str, tuple[str, ...]] = {}
        self.negated: dict[str, bool] = {}
        self.override_tensor: list[str] = []

    def take_items(self, items: Sequence[Item]) -> None:
        # Items the table has already read: `FlagTable.read_items` is the one argv reader.
        role_of = self.role_of
        for item in [it for it in items if it.key in role_of]:
            role = role_of[item.key or ""]
            self.found[role] = item.values
            self.negated[role] = item.negated
            if role == "override_tensor":
                self.override_tensor.extend(item.values)

    def read_env(self, env: Sequence[str]) -> None:
        for entry in env:
            name, _, value = entry.partition("=")
            flag = self.table.flag_for_env(name)
            role = self.role_of.get(flag.key) if flag is not None else None
            if flag is None or role is None or role in self.found:
                continue
            self.found[role] = (value,) if flag.nargs else ()
            self.negated[role] = not flag.nargs and _falsy(value)
            if role == "override_tensor":
                self.override_tensor.append(value)

    def val(self, role: str, default: str = "") -> str:
        v = self.found.get(role)
        return (v[0] if v else "") or default

    def num(self, role: str, default: int) -> int:
        v = self.found.get(role)
        return int_or(v[0], default) if v else default

    def on(self, role: str, default: bool) -> bool:
        if role not in self.found:
            return default
        return not self.negated.get(role, False)

    def settings(self) -> MemorySettings:
        val, num, on = self.val, self.num, self.on
        return MemorySettings(
            ctx=num("ctx", 0),
            parallel=num("parallel", -1),
            kv_unified=on("kv_unified", False),
            cache_type_k=val("cache_type_k", "f16").lower(),
            cache_type_v=val("cache_type_v", "f16").lower(),
            flash_attn=val("flash_attn", "auto").lower(),
            batch=num("batch", DEFAULT_BATCH),
            ubatch=num("ubatch", DEFAULT_UBATCH),
            gpu_layers=_gpu_layers(val("gpu_layers") or None),
            tensor_split=_split(val("tensor_split") or None),
            split_mode=val("split_mode", "layer").lower(),
            override_tensor=_override_pairs(self.override_tensor),
            cpu_moe=on("cpu_moe", False),
            n_cpu_moe=num("n_cpu_moe", 0),
            mmproj=val("mmproj"),
            draft=val("draft"),
            cache_ram_mib=num("cache_ram", DEFAULT_CACHE_RAM_MIB),
            swa_full=on("swa_full", False),
            kv_offload=on("kv_offload", True),
            embeddings=on("embeddings", False),
            explicit=frozenset(self.found),
        )


def _override_pairs(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """``-ot`` values as (pattern, buffer type) pairs, in order; malformed parts skipped."""
    out = []
    for value in values:
        for part in value.split(","):
            pattern, _, buft = part.partition("=")
            if pattern and buft:
                out.append((pattern, buft))
    return tuple(out)


def _falsy(v: str) -> bool:
    return v.strip().lower() in ("0", "false", "off", "no", "disabled")


def int_or(v: str | None, default: int) -> int:
    """`v` as the executor reads an integer (``0x`` prefixes too); `default` when unset or
    not one."""
    if v is None:
        return default
    try:
        return int(v, 0)
    except ValueError:
        return default


def _gpu_layers(v: str | None) -> int:
    if v is None or v.lower() == "auto":
        return -1
    if v.lower() == "all":
        return 1 << 30
    n = int_or(v, -1)
    return 1 << 30 if n <= -2 else n


def _split(v: str | None) -> tuple[float, ...]:
    if not v:
        return ()
    out = []
    for part in re.split(r"[,/]", v):
        try:
            out.append(max(float(part), 0.0))
        except ValueError:
            return ()
    return tuple(out) if sum(out) > 0 else ()


def fitter_off(s: MemorySettings) -> tuple[str, ...]:
    """The settings that switch llama.cpp's own fitter off (common/fit.cpp): ``-ngl``,
    ``-ts``, ``-ot`` and a row or tensor split mode."""
    out = []
    if "gpu_layers" in s.explicit:
        out.append("-ngl")
    if "tensor_split" in s.explicit:
        out.append("-ts")
    if s.override_tensor:
        out.append("-ot")
    if s.split_mode in ("row", "tensor"):
        out.append(f"--split-mode {s.split_mode}")
    return tuple(out)
