"""No two modules of the package define the same public name.

A name defined at module level (a function, a class, an assigned constant) whose name has no
leading underscore is found by walking each module's syntax tree; an import is no definition,
so a name re-exported (the same object under its own name elsewhere) is never counted. Type
variables (``T = TypeVar("T")``) are local by nature and left out. A name defined in two
modules fails here unless `SHARED` says why it must be.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "exedra_engine"

ADAPTERS = frozenset(
    {
        "_aio/instance.py",
        "_aio/launcher.py",
        "_aio/group.py",
        "_blocking/run.py",
        "_trio/instance.py",
        "_trio/launcher.py",
        "_trio/group.py",
    }
)
# {name: (why it is defined in several modules, the modules allowed to define it)}.
SHARED: dict[str, tuple[str, frozenset[str]]] = {
    "add_parser": (
        "each command module's entry: its parser beside its handler (pipx's layout)",
        frozenset(
            str(p.relative_to(PACKAGE))
            for pattern in ("*.py", "*/__init__.py")  # a command's module, or its package's
            for p in (PACKAGE / "cli").glob(pattern)
        ),
    ),
    **{
        name: ("the public API of each adapter (API.md), one per adapter", ADAPTERS)
        for name in ("Instance", "launch", "open_instance", "open_group", "GroupLogs")
    },
    "run": (
        "exedra_engine.blocking.run (API.md), and the console script `exedra_engine.cli:run` "
        "that pyproject.toml names",
        frozenset({"_blocking/run.py", "cli/__init__.py"}),
    ),
    # One primitive of the shared start sequence (_shell/launch/), as each adapter supplies it.
    **{
        name: (
            "each adapter's own implementation of one role of _shell/launch/'s sequence",
            frozenset(
                {"_aio/child.py", "_aio/loop.py", "_aio/logs.py"}
                | {"_trio/spawn.py", "_trio/loop.py", "_trio/logs.py"}
            ),
        )
        for name in ("Child", "LOOP", "Logs")
    },
    "Running": (
        "the blocking adapter's public `Running` (API.md) and the group planner's alias of what "
        "a running member holds (group/memory.py, the group issues' to rename)",
        frozenset({"_blocking/run.py", "_core/group/memory.py"}),
    ),
    "Malformed": (
        "a GGUF file's error (gguf/cursor.py) and a readiness answer's (launch/readiness.py): "
        "to name apart where their modules are next changed",
        frozenset({"_core/gguf/cursor.py", "_core/launch/readiness.py"}),
    ),
}


def _is_type_var(node: ast.stmt) -> bool:
    value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id in ("TypeVar", "ParamSpec", "TypeVarTuple")
    )


def defined_names(source: str) -> set[str]:
    """The public names `source` defines at module level (imports are not definitions)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif _is_type_var(node):
            continue
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


def definitions() -> dict[str, set[str]]:
    """{public name: the modules (relative to the package) that define it}."""
    where: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        for name in defined_names(path.read_text()):
            where[name].add(str(path.relative_to(PACKAGE)))
    return where


def collisions(where: dict[str, set[str]]) -> dict[str, list[str]]:
    out = {}
    for name, modules in where.items():
        allowed = SHARED[name][1] if name in SHARED else frozenset()
        if len(modules) > 1 and not modules <= allowed:
            out[name] = sorted(modules)
    return out


def test_no_two_modules_define_one_public_name() -> None:
    assert collisions(definitions()) == {}


def test_each_shared_name_has_its_reason_and_is_still_shared() -> None:
    where = definitions()
    assert all(why.strip() and modules for why, modules in SHARED.values())
    # A name no longer defined twice needs no reason: remove it from SHARED.
    assert sorted(n for n in SHARED if len(where.get(n, ())) < 2) == []


def test_defined_names_counts_definitions_not_imports() -> None:
    source = (
        "from typing import TypeVar\nfrom x import Shape\nfrom y import Z as Z\n"
        "T = TypeVar('T')\nLIMIT: int = 3\nMIB = 1 << 20\n_private = 1\n"
        "def shape(): ...\nclass Plan: ...\n"
    )
    assert defined_names(source) == {"LIMIT", "MIB", "shape", "Plan"}


def test_collisions_names_each_module_of_a_duplicate() -> None:
    where = {"shape": {"a.py", "b.py"}, "plan": {"a.py"}, "add_parser": {"cli/plan.py"}}
    assert collisions(where) == {"shape": ["a.py", "b.py"]}


def test_the_errors_public_functions_raise_are_exported() -> None:
    import exedra_engine
    from exedra_engine.errors import EmitError, HardwareFileError

    assert exedra_engine.HardwareFileError is HardwareFileError
    assert exedra_engine.EmitError is EmitError
    assert {"HardwareFileError", "EmitError"} <= set(exedra_engine.__all__)
