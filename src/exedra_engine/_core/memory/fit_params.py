"""The engine's own memory measurement, as a value: what ``llama-fit-params --fit-print on``
said it would reserve for a model and a set of flags. Pure: the shell runs the binary
(`exedra_engine._shell.measure`), this module holds what it found.

The figures are what llama.cpp **reserves** (exact for device memory, an upper bound for the
host's resident peak: see docs/explanation.md), in bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from exedra_engine._core.executors.flags import FlagTable, Item
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.host.machine import FitMeasurement as FitMeasurement  # noqa: PLC0414
from exedra_engine._core.host.machine import FitRow as FitRow  # noqa: PLC0414
from exedra_engine._core.host.measurement_bounds import (
    DEVICE_NAME,
    MAX_BYTES,
    MAX_CTX,
    MAX_ROWS,
)
from exedra_engine.errors import MeasureError, PlanError

MiB = 1 << 20


_ROW = re.compile(rf"({DEVICE_NAME}) ([0-9]{{1,12}}) ([0-9]{{1,12}}) ([0-9]{{1,12}})")
# llama.cpp src/llama.cpp: "using device CUDA0 (NVIDIA ...) (0000:01:00.0) - 23000 MiB free"
_DEVICE_FREE = re.compile(
    rf"using device ({DEVICE_NAME}) \(.*\) - ([0-9]{{1,12}}) MiB free[ \t\r]*$", re.M | re.A
)
# llama.cpp src/llama-context.cpp: "llama_context: n_ctx         = 4096", after the log's
# timestamp and level ("0.00.141.596 D ")
_N_CTX = re.compile(r"(?:^|[ \t])llama_context: n_ctx[ \t]+= ([0-9]{1,12})[ \t\r]*$", re.M | re.A)


def rows_from_print(stdout: str) -> tuple[tuple[FitRow, ...], FitRow]:
    """The device rows and the ``Host`` row of ``llama-fit-params --fit-print on``'s stdout:
    one line per device and a last one for ``Host``, each ``NAME model context compute`` in
    whole MiB (rounded down by the engine). Raises `MeasureError` for anything else."""
    devices: list[FitRow] = []
    host: FitRow | None = None
    for n, line in enumerate(stdout.split("\n"), 1):
        text = line.strip(" \t\r")
        if not text:
            continue
        m = _ROW.fullmatch(text)
        if m is None:
            raise MeasureError(
                f"llama-fit-params printed {text[:80]!r} (line {n}), "
                "not 'DEVICE model context compute' in MiB (ASCII digits)"
            )
        if host is not None:
            raise MeasureError(f"llama-fit-params printed a row after the Host row (line {n})")
        if len(devices) >= MAX_ROWS:
            raise MeasureError(f"llama-fit-params printed more than {MAX_ROWS} rows")
        row = FitRow(
            name=m.group(1),
            model=int(m.group(2)) * MiB,
            context=int(m.group(3)) * MiB,
            compute=int(m.group(4)) * MiB,
        )
        if any(part > MAX_BYTES for part in (row.model, row.context, row.compute)):
            raise MeasureError(f"llama-fit-params printed {text[:80]!r} (line {n}): past 1 PiB")
        if row.name == "Host":
            host = row
        elif any(d.name == row.name for d in devices):
            raise MeasureError(f"llama-fit-params printed device {row.name} twice (line {n})")
        else:
            devices.append(row)
    if host is None:
        raise MeasureError("llama-fit-params printed no Host row")
    return tuple(devices), host


def device_free_from_log(log: str) -> dict[str, int]:
    """Free bytes per device as the engine saw them at load (its ``using device`` lines,
    printed at debug verbosity); empty on a CPU-only load."""
    return {m.group(1): int(m.group(2)) * MiB for m in _DEVICE_FREE.finditer(log)}


def ctx_from_log(log: str) -> int | None:
    """The context the engine sized its KV cache for (``llama_context: n_ctx = N``), or None
    when the log does not say (it is printed at debug verbosity)."""
    m = _N_CTX.search(log)
    if m is None:
        return None
    n = int(m.group(1))
    if not 0 < n <= MAX_CTX:
        raise MeasureError(f"llama-fit-params' log says n_ctx = {n}: not a context size")
    return n


def measurement_from(
    stdout: str,
    log: str,
    *,
    model: str,
    args: tuple[str, ...],
    ctx: int,
    settings: tuple[str, ...] = (),
    build: str = "",
    host_free: int | None = None,
) -> FitMeasurement:
    """One `FitMeasurement` from what llama-fit-params printed: its rows (`stdout`), and
    from its log the context it sized for (else `ctx`, what the plan asked) and each
    device's free memory. `host_free` is the memory the probe found usable."""
    devices, host = rows_from_print(stdout)
    free = device_free_from_log(log)
    return FitMeasurement(
        model=model,
        settings=settings,
        args=args,
        ctx=ctx_from_log(log) or ctx,
        host=FitRow(
            name=host.name,
            model=host.model,
            context=host.context,
            compute=host.compute,
            free=host_free or 0,
        ),
        devices=tuple(
            FitRow(
                name=d.name,
                model=d.model,
                context=d.context,
                compute=d.compute,
                free=free.get(d.name, 0),
            )
            for d in devices
        ),
        build=build,
    )


_TRUE = frozenset({"1", "true", "on", "enabled", "yes"})
_FALSE = frozenset({"0", "false", "off", "disabled", "no"})


def memory_settings(
    profile: ExecutorProfile, args: Sequence[str], env: Sequence[str] = ()
) -> tuple[str, ...]:
    """`memory_settings_of` an argv (raising `PlanError` for one the table cannot cut)."""
    return memory_settings_of(profile, profile.flags.split_items(args, "plan args"), env)


def memory_settings_of(
    profile: ExecutorProfile, items: Sequence[Item], env: Sequence[str] = ()
) -> tuple[str, ...]:
    """The flags of a plan (its `args` and ``NAME=VALUE`` `env`) that change what the
    executor reserves (`ExecutorProfile.measure_flags`), canonical: each by its key, in the
    plan's order, variables as flags, and the slot count last, made explicit where the
    executor chooses it (llama-server's auto: ``--parallel 4 --kv-unified``). Equal settings
    reserve equal memory. `items` are the plan's argv as the table reads it."""
    table: FlagTable = profile.flags
    found = [it for it in items if it.key in profile.measure_flags]
    in_args = {it.key for it in found}
    found += table.split_items(_env_flags(profile, env, in_args), "plan env")
    out: list[str] = []
    slots: str | None = None
    for it in found:
        if it.key == profile.slots_flag and not it.negated:
            slots = it.values[0] if it.values else None
        elif it.key != profile.unified_flag:
            out.extend(_spelled(it.key or "", it.values, it.negated, table))
        elif not it.negated:  # not unified is the default: no token
            out.append(it.key)
    if profile.slots_flag:
        out.extend(_slot_tokens(profile, slots, unified=profile.unified_flag in out))
    return tuple(out)


def _slot_tokens(profile: ExecutorProfile, slots: str | None, *, unified: bool) -> list[str]:
    """The slot count made explicit, last: where the executor chooses it (unset or -1), its
    automatic count, which shares one unified cache."""
    out: list[str] = []
    if (slots is None or slots.strip() == "-1") and profile.auto_slots:
        slots = str(profile.auto_slots)
        if profile.unified_flag and not unified:
            out.append(profile.unified_flag)
    if slots is not None:
        out.extend((profile.slots_flag, slots))
    return out


def _env_flags(profile: ExecutorProfile, env: Sequence[str], in_args: set[str | None]) -> list[str]:
    """The plan's variables for memory flags, as flags; a flag in argv wins over its
    variable, as in the executor."""
    table = profile.flags
    out: list[str] = []
    for entry in env:
        name, sep, value = entry.partition("=")
        flag = table.flag_for_env(name) if sep else None
        if flag is None or flag.key in in_args or flag.key not in profile.measure_flags:
            continue
        if flag.nargs == 1:
            out.extend((flag.key, value))
        elif flag.nargs == 0 and value.lower() in _TRUE:
            out.append(flag.key)
        elif flag.nargs == 0 and value.lower() in _FALSE and flag.negations:
            out.append(_long(flag.negations))
    return out


def companion_args(
    profile: ExecutorProfile,
    settings: Sequence[str],
    *,
    accepts: Callable[[str], bool],
    arch: str = "",
    window: int = 0,
) -> tuple[str, ...]:
    """What the measuring companion is run with: the `settings` (`memory_settings`) it
    `accepts` (asked by canonical key). Where all slots share one KV cache and the companion
    cannot be told so (llama-fit-params has no ``--kv-unified``), it is given one slot: one
    cache of the whole context, as the shared one, where more slots would each get a padded
    share. A shared cache keeps one sliding window per slot: for a model of `arch` with a
    `window` (0: none), the companion's window is widened to match
    (`ExecutorProfile.window_override`)."""
    items = profile.flags.split_items(settings, "memory settings")
    unified = any(it.key == profile.unified_flag and not it.negated for it in items)
    one_slot = unified and not accepts(profile.unified_flag)
    out: list[str] = []
    slots = 1
    for it in items:
        if it.key is None or not accepts(it.key):
            continue
        if it.key == profile.slots_flag and one_slot:
            slots = _int_or(it.values[0] if it.values else "", 1)
            out.extend((it.tokens[0], "1"))
        else:
            out.extend(it.tokens)
    if one_slot and slots > 1:
        out.extend(_wider_window(profile, accepts, arch, window * slots))
    return tuple(out)


def _wider_window(
    profile: ExecutorProfile, accepts: Callable[[str], bool], arch: str, window: int
) -> tuple[str, ...]:
    over = profile.window_override
    if window > 0 and arch and over and accepts(over[0]):
        return tuple(t.format(arch=arch, window=window) for t in over)
    return ()


def _int_or(text: str, default: int) -> int:
    try:
        return int(text)
    except ValueError:
        return default


def measurement_for(
    measurements: Sequence[FitMeasurement],
    profile: ExecutorProfile,
    model: str,
    args: Sequence[str],
    env: Sequence[str] = (),
) -> FitMeasurement | None:
    """`measurement_of` an argv (raising `PlanError` for one the table cannot cut)."""
    if not measurements:
        return None
    items = profile.flags.split_items(args, "plan args")
    return measurement_of(measurements, profile, model, items, env)


def measurement_of(
    measurements: Sequence[FitMeasurement],
    profile: ExecutorProfile,
    model: str,
    items: Sequence[Item],
    env: Sequence[str] = (),
) -> FitMeasurement | None:
    """The measurement (the newest, last) made for `model` with the same memory settings as
    a plan's `args` and `env`, or None: a measurement for another context or cache type says
    nothing about this plan. A measurement of the same path wins; else one of the same file
    name (the target keeps its models elsewhere). `items` are the plan's argv as the table
    reads it."""
    if not measurements:
        return None
    wanted = _order_free(profile, memory_settings_of(profile, items, env))
    same = []
    for i, m in enumerate(measurements):
        try:
            settings = _order_free(profile, m.settings)
        except PlanError as e:
            # A file's measurements were checked when it was read; a value built in code
            # is named by its place, so that it is not every plan's anonymous failure.
            raise PlanError(f"hardware measurements[{i}] ({m.model}): settings: {e}") from None
        if settings == wanted:
            same.append(m)
    base = _basename(model)
    for m in reversed(same):
        if m.model == model:
            return m
    for m in reversed(same):
        if _basename(m.model) == base:
            return m
    return None


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _order_free(profile: ExecutorProfile, tokens: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    # The same flags given in another order reserve the same memory.
    return tuple(sorted(it.tokens for it in profile.flags.split_items(tokens, "memory flags")))


def _spelled(key: str, values: tuple[str, ...], negated: bool, table: FlagTable) -> list[str]:
    if negated:
        return [_long(table.flags[key].negations)]
    return [key, *values]


def _long(names: tuple[str, ...]) -> str:
    longs = [n for n in names if n.startswith("--")]
    return longs[-1] if longs else names[-1]
