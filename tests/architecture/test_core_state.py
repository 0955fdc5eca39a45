"""The core is pure in state too (issue 20 item 4): no module of `exedra_engine._core` holds
a value that can change after import, and none changes one.

What fails: a module-level dict, list or set (a display, a comprehension or a ``dict()``...
call; a constant table is a `FrozenDict` via ``freeze({...})``, a tuple or a frozenset), code
that mutates a module-level container (``X[k] = v``, ``del X[k]``, ``X.append(...)``,
``X.update(...)``...), rebinding a module global (``global X``), and patching an enum's member
map. Any of these would let a function's answer depend on what the process did earlier (the
executor registry and the patched `Kind` were that, until the `Executors` value replaced
them). Memoising caches (`functools.cache`) are allowed: they need hashable arguments, so
they can only remember answers to values. The files are read and their ASTs walked, as the
import contract does.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "src" / "exedra_engine" / "_core"

_MUTATORS = frozenset(
    {
        "append",
        "extend",
        "insert",
        "remove",
        "pop",
        "popitem",
        "clear",
        "update",
        "setdefault",
        "add",
        "discard",
        "sort",
        "reverse",
    }
)
_CONTAINERS = (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)
_CONTAINER_CALLS = frozenset({"dict", "list", "set", "defaultdict", "OrderedDict", "bytearray"})


def _module_containers(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to a mutable container, with what it is."""
    names: dict[str, str] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        call = isinstance(value, ast.Call) and (
            getattr(value.func, "id", None) or getattr(value.func, "attr", None)
        )
        if isinstance(value, _CONTAINERS) or call in _CONTAINER_CALLS:
            what = call if call in _CONTAINER_CALLS else type(value).__name__.lower()
            names.update((t.id, what) for t in targets if isinstance(t, ast.Name))
    return names


def _root(node: ast.expr) -> str | None:
    while isinstance(node, ast.Subscript | ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def state_changes(source: str, name: str = "m.py") -> set[str]:
    """What code in `source` does to module-level state: one line per name and kind."""
    tree = ast.parse(source)
    tables = _module_containers(tree)
    found = {f"{name}: {t} is a mutable {what}" for t, what in tables.items()}
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Global):
                found.update(f"{name}: {g} rebound" for g in node.names)
            elif isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
                targets = (
                    node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
                )
                for t in targets:
                    if isinstance(t, ast.Subscript | ast.Attribute) and _root(t) in tables:
                        found.add(f"{name}: {_root(t)} mutated")
                    if isinstance(t, ast.Subscript) and _attr(t.value) == "_value2member_map_":
                        found.add(f"{name}: _value2member_map_ patched")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _MUTATORS
                and _root(node.func.value) in tables
            ):
                found.add(f"{name}: {_root(node.func.value)} mutated")
    return found


def _attr(node: ast.expr) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) else None


# The one exception, named: the one-slot handoff of the planner's reading to the plan it is
# making (`remember` → `LaunchPlan.__post_init__`), taken by identity, which changes no
# result, only what it costs. A plan holds its own reading; nothing is stored beside it.
MEMOS = frozenset(
    {"plan/launch_plan.py: _HANDOFF is a mutable list", "plan/launch_plan.py: _HANDOFF mutated"}
)


def test_no_module_level_mutable_state_in_core() -> None:
    found = set()
    for path in sorted(CORE.rglob("*.py")):
        found |= state_changes(path.read_text(), str(path.relative_to(CORE)))
    assert found == MEMOS


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("_SEEN = {}\ndef f(k):\n    _SEEN[k] = 1\n", "m.py: _SEEN mutated"),
        ("_SEEN = []\ndef f(k):\n    _SEEN.append(k)\n", "m.py: _SEEN mutated"),
        ("_SEEN = set()\ndef f(k):\n    _SEEN.add(k)\n", "m.py: _SEEN mutated"),
        ("_SEEN = {}\ndef f(k):\n    del _SEEN[k]\n", "m.py: _SEEN mutated"),
        ("_SEEN = {'a': []}\ndef f(k):\n    _SEEN['a'].append(k)\n", "m.py: _SEEN mutated"),
        ("_N = 0\ndef f():\n    global _N\n    _N += 1\n", "m.py: _N rebound"),
        ("import enum\ndef f(E, v, m):\n    E._value2member_map_[v] = m\n", "m.py: "
         "_value2member_map_ patched"),
        ("_TABLE = {'a': 1}\n", "m.py: _TABLE is a mutable dict"),
        ("_TABLE: Final[Mapping[str, int]] = {'a': 1}\n", "m.py: _TABLE is a mutable dict"),
        ("_SEEN = []\n", "m.py: _SEEN is a mutable list"),
        ("_SEEN = set()\n", "m.py: _SEEN is a mutable set"),
        ("_BY = {k: 1 for k in 'ab'}\n", "m.py: _BY is a mutable dictcomp"),
        ("__all__ = ['f']\n", "m.py: __all__ is a mutable list"),
    ],
)  # fmt: skip
def test_the_state_check_flags_a_change(source: str, flagged: str) -> None:
    assert flagged in state_changes(source)


def test_the_state_check_passes_immutable_tables_and_local_state() -> None:
    source = (
        "_TABLE = freeze({'a': 1})\n"
        "_NAMES = frozenset({'a'})\n"
        "_ORDER = ('a', 'b')\n"
        "_VIEW = MappingProxyType({'a': 1})\n"
        "@functools.cache\n"
        "def g(k):\n"
        "    return {k: 1}\n"
        "def f(k):\n"
        "    out = {}\n"
        "    out[k] = _TABLE.get(k)\n"
        "    out.update(_TABLE)\n"
        "    return out\n"
    )
    assert state_changes(source) == set()
