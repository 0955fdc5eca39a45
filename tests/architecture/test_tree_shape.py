"""The shape of the tree: floors, no cycle, no upward import, small folders, short modules.

The files are read and their ASTs walked; nothing is imported. A *room* is a sub-package or
top-level module of ``_core`` (``_core.plan``, ``_core.values``) or a top-level part of the
package (``_shell``, ``cli``, ``errors``). Each room stands on a floor (`FLOORS`, drawn in
docs/explanation.md); an import may go down a floor or across one, never up, and the rooms'
graph has no cycle.

An import under ``if TYPE_CHECKING:`` names a type for the checker and never runs, but it says
what a module knows: it counts towards a cycle and as an arrow between floors, like any other.
A module that must name a type from above stands on the wrong floor, or the type does.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "exedra_engine"

# Bottom to top. Rooms on one floor may import each other (no cycle); never a floor above.
FLOORS: tuple[tuple[str, frozenset[str]], ...] = (
    ("leaves", frozenset({"errors", "constants", "_version", "_sysconf"})),
    (
        "core: the base of values",
        frozenset({"_core", "_core.struct", "_core.outcome", "_core.targets"}),
    ),
    ("core: executors, model files", frozenset({"_core.executors", "_core.gguf"})),
    ("core: the host, secrets", frozenset({"_core.host", "_core.secrets"})),
    ("core: memory", frozenset({"_core.memory"})),
    ("core: override files", frozenset({"_core.config"})),
    ("core: the plan's values", frozenset({"_core.values"})),
    ("core: the planner", frozenset({"_core.plan"})),
    ("core: launch policy", frozenset({"_core.launch"})),
    ("core: groups", frozenset({"_core.group"})),
    ("core: emit", frozenset({"_core.emit"})),
    ("shells", frozenset({"_shell"})),
    ("adapters", frozenset({"_trio", "_aio", "_blocking"})),
    ("public", frozenset({"exedra_engine", "aio", "blocking", "testing"})),
    ("command line", frozenset({"cli", "__main__"})),
)

MAX_MODULES_PER_FOLDER = 12
# {folder relative to the package: why it holds more}. Each must still need it.
# {folder relative to the package: why it holds more modules}. Each must still need it. None
# does: cli/ is split by command (cli/plan/, cli/launch/, ...), _shell/ by concept (_shell/local/).
BIG_FOLDERS: dict[str, str] = {}

MAX_LINES = 500
# Generated, data not code: no limit (scripts/gen_flag_tables.py writes it from --help).
GENERATED = frozenset({"_core/executors/_flagdata.py"})
# {module relative to the package: why it is longer}. Each must still need it.
LONG_MODULES: dict[str, str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


FILES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)
MODULES = {module_name(p): p for p in FILES}


def _type_only_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                lines.update(n.lineno for n in ast.walk(stmt) if hasattr(n, "lineno"))
    return lines


def imports(
    source: str, module: str, is_package: bool, known: Iterable[str]
) -> Iterator[tuple[str, bool]]:
    """(imported module of the package, whether only under TYPE_CHECKING) for each import.

    ``from P import n`` is an arrow to ``P.n`` when that is a module, else to ``P``: a module
    that takes a sibling from its own package does not depend on the package's ``__init__``."""
    known = set(known)
    tree = ast.parse(source)
    type_only = _type_only_lines(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name, node.lineno in type_only
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = (module if is_package else module.rpartition(".")[0]).split(".")
                base = ".".join([*pkg[: len(pkg) - node.level + 1], *([base] if base else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if target in known:
                    yield target, node.lineno in type_only
                elif base in known:
                    yield base, node.lineno in type_only


def room(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts:
        return "exedra_engine"
    if parts[0] == "_core" and len(parts) > 1:
        return f"_core.{parts[1]}"
    return parts[0]


def _edges() -> dict[str, dict[str, bool]]:
    """{module: {imported module: type-only}} (type-only when every import of it is)."""
    out: dict[str, dict[str, bool]] = {}
    for name, path in MODULES.items():
        targets = out.setdefault(name, {})
        for target, type_only in imports(
            path.read_text(), name, path.name == "__init__.py", MODULES
        ):
            if target != name:
                targets[target] = targets.get(target, True) and type_only
    return out


EDGES = _edges()


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def floor_of(name: str) -> int | None:
    return next((i for i, (_, rooms) in enumerate(FLOORS) if name in rooms), None)


def upward(edges: Mapping[str, Mapping[str, bool]]) -> list[str]:
    """Each import from a room to a room on a higher floor, type-only ones too."""
    found = []
    for source, targets in edges.items():
        for target in targets:
            a, b = room(source), room(target)
            fa, fb = floor_of(a), floor_of(b)
            if a == b or fa is None or fb is None or fb <= fa:
                continue
            found.append(f"{source} -> {target} ({FLOORS[fa][0]} -> {FLOORS[fb][0]})")
    return sorted(found)


def room_graph(edges: Mapping[str, Mapping[str, bool]]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for source, targets in edges.items():
        for target in targets:
            if room(source) != room(target):
                graph.setdefault(room(source), set()).add(room(target))
    return graph


def module_graph(edges: Mapping[str, Mapping[str, bool]]) -> dict[str, set[str]]:
    """{module: imported modules}, type-only imports counted."""
    return {m: set(ts) for m, ts in edges.items()}


def test_the_graph_is_found() -> None:
    assert "exedra_engine._core.plan.planner" in EDGES
    assert "exedra_engine._core.plan.layers" in EDGES["exedra_engine._core.plan.planner"]
    assert sum(len(t) for t in EDGES.values()) > 200


def test_every_room_stands_on_a_floor() -> None:
    rooms = {room(m) for m in MODULES}
    assert sorted(r for r in rooms if floor_of(r) is None) == []
    named = [r for _, rs in FLOORS for r in rs]
    assert len(named) == len(set(named)), "a room on two floors"


def test_no_import_cycle_between_modules() -> None:
    assert cycles(module_graph(EDGES)) == []


def test_no_import_cycle_between_rooms() -> None:
    assert cycles(room_graph(EDGES)) == []


def test_no_import_runs_up_a_floor() -> None:
    assert upward(EDGES) == []


def _folders() -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in FILES:
        if path.name != "__init__.py":
            folder = str(path.parent.relative_to(PACKAGE)) if path.parent != PACKAGE else "."
            counts[folder] = counts.get(folder, 0) + 1
    return counts


def test_no_folder_holds_more_than_a_dozen_modules() -> None:
    big = {f: n for f, n in _folders().items() if n > MAX_MODULES_PER_FOLDER}
    assert sorted(set(big) - set(BIG_FOLDERS)) == [], big


def test_a_big_folder_exception_is_still_needed() -> None:
    folders = _folders()
    stale = [f for f in BIG_FOLDERS if folders.get(f, 0) <= MAX_MODULES_PER_FOLDER]
    assert stale == [], f"remove {stale} from BIG_FOLDERS"


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_module_is_over_500_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): _lines(p) for p in FILES if _lines(p) > MAX_LINES}
    assert sorted(set(long) - set(LONG_MODULES) - GENERATED) == [], long


def test_each_long_module_exception_is_still_needed() -> None:
    short = [m for m in LONG_MODULES if _lines(PACKAGE / m) <= MAX_LINES]
    assert short == [], f"remove {short} from LONG_MODULES"


# -- the checker itself catches what it must ------------------------------------------------


def test_cycles_finds_a_cycle_and_only_it() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_a_type_only_import_closes_a_cycle() -> None:
    edges = {"a": {"b": False}, "b": {"a": True}}
    assert cycles(module_graph(edges)) == [["a", "b"]]
    assert room_graph({"exedra_engine._core.values": {"exedra_engine._core.plan.x": True}}) == {
        "_core.values": {"_core.plan"}
    }


def test_upward_flags_an_import_up_a_floor() -> None:
    up = {"exedra_engine._core.values": {"exedra_engine._core.plan.layers": False}}
    assert upward(up) == [
        "exedra_engine._core.values -> exedra_engine._core.plan.layers "
        "(core: the plan's values -> core: the planner)"
    ]
    down = {"exedra_engine._core.plan.layers": {"exedra_engine._core.values": False}}
    assert upward(down) == []
    type_only = {"exedra_engine._core.secrets.shown": {"exedra_engine._core.values": True}}
    assert upward(type_only) == [
        "exedra_engine._core.secrets.shown -> exedra_engine._core.values "
        "(core: the host, secrets -> core: the plan's values)"
    ]


def test_imports_resolve_submodules_relative_and_type_only() -> None:
    known = {"exedra_engine._core.emit", "exedra_engine._core.emit.names", "exedra_engine.cli"}
    source = (
        "from typing import TYPE_CHECKING\n"
        "from exedra_engine._core.emit import names\n"
        "from .. import cli\n"
        "if TYPE_CHECKING:\n    from exedra_engine._core.emit import Origin\n"
    )
    found = sorted(imports(source, "exedra_engine.cli.emit", False, known))
    assert found == [
        ("exedra_engine._core.emit", True),
        ("exedra_engine._core.emit.names", False),
        ("exedra_engine.cli", False),
    ]


def test_room_names_a_core_subpackage_or_a_top_level_part() -> None:
    assert room("exedra_engine._core.plan.layers") == "_core.plan"
    assert room("exedra_engine._core.values") == "_core.values"
    assert room("exedra_engine._shell.drive") == "_shell"
    assert room("exedra_engine") == "exedra_engine"
