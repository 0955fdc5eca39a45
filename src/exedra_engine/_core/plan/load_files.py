"""Every file an executor reads at load, derived from a plan's argv and env. Pure.

The model flag names one file, but llama.cpp loads a split model (``*-00001-of-0000N.gguf``)
as the set of its siblings, and a projector (``--mmproj``) or a draft model (``--model-draft``)
is read at load too. The load budget and the container mounts must count every one: a budget
sized from the first shard alone (61 KiB of a 40 GiB set) kills the pod on every start.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from exedra_engine._core.executors.flags import Item
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.endpoint import env_map
from exedra_engine._core.struct import freeze
from exedra_engine._core.values import ModelFile, ModelInfo
from exedra_engine.errors import EngineError

SPLIT = re.compile(r"(?P<prefix>.*)-(?P<i>[0-9]{5})-of-(?P<n>[0-9]{5})\.gguf")
"""llama.cpp's split naming (``llama_split_path``): the loader finds the siblings by it."""
SPLIT_MAX = 9999
"""More shards than anyone writes: a hostile name cannot make the list huge."""

_ROLES = freeze({"--model-draft": "draft", "--mmproj": "mmproj"})


def normal_path(path: str) -> str:
    """`path` with ``.``, ``..`` and repeated slashes resolved lexically."""
    if path[:1] == "/" and "//" not in path and "/." not in path and path[-1:] != "/":
        return path  # the common case, an absolute path with nothing to resolve
    absolute = path.startswith("/")
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
        elif part != ".." or not absolute:
            parts.append(part)
    return ("/" if absolute else "") + "/".join(parts)


def named_files(
    p: ExecutorProfile, items: Sequence[Item], env: Mapping[str, str] | Sequence[str]
) -> tuple[tuple[str, str], ...]:
    """(path, role) of each file a model-file flag (or its variable) names, in argv order,
    each once. A flag given as an argument wins over its variable, as the executor reads.
    `items` are the argv as the flag table reads it (a plan's reading)."""
    found: dict[str, str] = {}
    seen: set[str] = set()
    files = p.model_file_flags
    for key, values in [(it.key, it.values) for it in items if it.key in files]:
        if values:
            seen.add(key)
            found.setdefault(normal_path(values[0]), _role(p, key))
    table = p.flags
    envmap = env_map(env)
    for name in [n for n in envmap if n in table.env_names]:
        f = table.flag_for_env(name)
        value = envmap[name]
        if f is not None and f.key in files and value and f.key not in seen:
            found.setdefault(normal_path(value), _role(p, f.key))
    return tuple(found.items())


def unit_files(
    p: ExecutorProfile, args: Sequence[str], env: Mapping[str, str] | Sequence[str]
) -> tuple[tuple[str, str], ...]:
    """`named_files` of an argv read back from an emitted unit, not a plan (a plan has its
    reading): cut here; an argv the table cannot cut names none."""
    try:
        items = p.flags.split_items(args, "unit args")
    except EngineError:
        items = ()
    return named_files(p, items, env)


def _role(p: ExecutorProfile, key: str) -> str:
    if key == p.model_flag:
        return "model"
    return _ROLES.get(key, key.lstrip("-"))


def shards(path: str) -> tuple[str, ...]:
    """The other files of the split set `path` opens (none for an unsplit file, or for a
    shard other than the first, which the executor is not given)."""
    m = SPLIT.fullmatch(path)
    if m is None or int(m["i"]) != 1:
        return ()
    n = min(int(m["n"]), SPLIT_MAX)
    return tuple(f"{m['prefix']}-{i:05d}-of-{m['n']}.gguf" for i in range(2, n + 1))


def load_files(
    p: ExecutorProfile,
    items: Sequence[Item],
    env: Mapping[str, str] | Sequence[str],
    model: ModelInfo | None = None,
    sizes: Mapping[str, int] | None = None,
) -> tuple[ModelFile, ...]:
    """Every file the executor reads at load, with its size when known: from `sizes` (the
    facts a shell gathered), else the model header's, else 0 (unknown). `items`: as for
    `named_files`."""
    known = dict(sizes or {})
    if model is not None and model.size > 0:
        known.setdefault(normal_path(model.path), model.size)
    out: list[ModelFile] = []
    for path, role in named_files(p, items, env):
        out.append(ModelFile(path=path, size=known.get(path, 0), role=role))
        out += [ModelFile(path=s, size=known.get(s, 0), role="shard") for s in shards(path)]
    return tuple(out)


def with_sizes(files: Sequence[ModelFile], sizes: Mapping[str, int]) -> tuple[ModelFile, ...]:
    """`files` with the sizes a shell read filled in where they were unknown."""
    return tuple(
        ModelFile(path=f.path, size=f.size or sizes.get(f.path, 0), role=f.role) for f in files
    )
