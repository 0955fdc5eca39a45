"""The import contract: `exedra_engine._core` is pure, and `_shell` stays below the adapter.

The files are read and their ASTs walked; nothing here imports them. A core module may import
only the pure modules on the allow-lists below, other core modules, and the three leaf modules
of the package that the core shares with the shells (errors, constants, _version). Every import
counts: at module level, inside a function, under ``if TYPE_CHECKING``, relative, and the
dynamic forms ``__import__("x")`` and ``importlib.import_module("x")`` when their argument is
a literal (a computed one is itself a violation: it cannot be checked).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "exedra_engine"

# Standard-library modules that neither read, write, time, spawn nor signal. An allow-list:
# a module not named here fails the test until someone decides it is pure and adds it.
PURE_STDLIB = frozenset(
    {
        "__future__",
        "abc",
        "bisect",
        "collections",
        "dataclasses",
        "difflib",
        "enum",
        "functools",
        "hashlib",  # digests of values (the emitter's name suffix)
        "heapq",
        "ipaddress",
        "itertools",
        "json",
        "math",
        "operator",
        "re",
        "shlex",  # quoting a command line as text (the llama-swap cmd)
        "string",
        "struct",
        "textwrap",
        "types",
        "typing",
        "unicodedata",
    }
)
# Third-party libraries the core uses on values only (yaml: safe_load of a string).
PURE_THIRD_PARTY = frozenset({"msgspec", "returns", "typing_extensions", "yaml"})

# Named for the message, and as a check on the allow-lists: none of these may ever be on them.
EFFECTFUL = frozenset(
    {
        "asyncio",
        "concurrent",
        "ctypes",
        "fcntl",
        "glob",
        "http",
        "importlib",
        "io",
        "mmap",
        "multiprocessing",
        "os",
        "pathlib",
        "select",
        "selectors",
        "shutil",
        "signal",
        "socket",
        "subprocess",
        # sys: the core has no use for argv, stdout or the interpreter's state; none of its
        # modules imports it today. A module that needs it harmlessly (sys.maxsize, say) goes
        # in EXCEPTIONS with the reason.
        "sys",
        "tempfile",
        "threading",
        "time",
        "trio",
        "urllib",
    }
)

# In-package modules the core may import besides exedra_engine._core.*: leaves of the package
# that import nothing effectful themselves (they are checked below like core modules).
CORE_LEAVES = ("exedra_engine.errors", "exedra_engine.constants", "exedra_engine._version")
# The layers above the core; also the package root, whose __init__ imports the shells.
ABOVE_CORE = (
    "exedra_engine._shell",
    "exedra_engine._trio",
    "exedra_engine.cli",
    "exedra_engine.testing",
)

# Per-module exceptions, each with its reason: {module file, relative to src/: {import: why}}.
EXCEPTIONS: dict[str, dict[str, str]] = {
    "exedra_engine/constants.py": {
        "exedra_engine._sysconf": "a wheel's generated constant (hatch_build.py), a string only",
    },
}

# Builtins with effects that need no import at all.
EFFECTFUL_BUILTINS = frozenset({"open", "print", "input", "exec", "eval", "breakpoint"})


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def imported(tree: ast.AST, module: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """(line, dotted module name) for every import in `tree`, relative ones resolved.

    ``from P import n`` yields P, and also ``P.n`` when P is in this package (n may be a
    submodule: ``from exedra_engine import _trio``). A dynamic import with a computed name
    yields ``<dynamic>``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = _package_of(module, is_package).split(".")
                anchor = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            yield node.lineno, base
            if _under(base, "exedra_engine"):
                for alias in node.names:
                    yield node.lineno, f"{base}.{alias.name}"
        elif isinstance(node, ast.Call):
            f = node.func
            dynamic = (isinstance(f, ast.Name) and f.id in ("__import__", "import_module")) or (
                isinstance(f, ast.Attribute) and f.attr == "import_module"
            )
            if dynamic:
                arg = node.args[0] if node.args else None
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    yield node.lineno, arg.value
                else:
                    yield node.lineno, "<dynamic>"


def core_verdict(name: str) -> str | None:
    """Why a core module may not import `name`, or None if it may."""
    top = name.split(".", maxsplit=1)[0]
    if name == "<dynamic>":
        return "a dynamic import whose module cannot be read from the source"
    if top == "exedra_engine":
        if _under(name, "exedra_engine._core") or any(_under(name, m) for m in CORE_LEAVES):
            return None
        if any(_under(name, m) for m in ABOVE_CORE):
            return "a layer above the core"
        # `from exedra_engine import X` runs the package root, which imports the shells.
        return "not a core module (import from the defining module in _core)"
    if top in EFFECTFUL:
        return "effectful"
    if top in PURE_STDLIB or top in PURE_THIRD_PARTY:
        return None
    return "not on the pure allow-list (PURE_STDLIB, PURE_THIRD_PARTY)"


def effectful_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in EFFECTFUL_BUILTINS
        ):
            yield node.lineno, f"{node.func.id}()"


def core_violations(
    source: str, module: str, where: str = "", is_package: bool = False
) -> list[str]:
    tree = ast.parse(source)
    allowed = EXCEPTIONS.get(where, {})
    out = [
        f"{where or module}:{line}: {name}: {why}"
        for line, name in imported(tree, module, is_package)
        if not any(_under(name, a) for a in allowed) and (why := core_verdict(name))
    ]
    out += [
        f"{where or module}:{line}: {call}: effectful builtin"
        for line, call in effectful_calls(tree)
    ]
    return out


def _files(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (PACKAGE / d).rglob("*.py"))


CORE_FILES = _files("_core")
LEAF_FILES = [PACKAGE / f"{m.rpartition('.')[2]}.py" for m in CORE_LEAVES]
SHELL_FILES = _files("_shell")


def _id(p: Path) -> str:
    return str(p.relative_to(SRC))


def test_the_core_and_its_leaves_are_found() -> None:
    names = {p.name for p in CORE_FILES}
    assert {"__init__.py", "planner.py", "layers.py", "values.py", "header.py"} <= names
    assert all(p.is_file() for p in LEAF_FILES)
    assert SHELL_FILES


def test_the_lists_agree() -> None:
    assert not EFFECTFUL & (PURE_STDLIB | PURE_THIRD_PARTY)
    for where, allowed in EXCEPTIONS.items():
        assert (SRC / where).is_file(), where
        assert all(reason.strip() for reason in allowed.values()), where


@pytest.mark.parametrize("path", CORE_FILES + LEAF_FILES, ids=_id)
def test_a_core_module_imports_only_pure_modules(path: Path) -> None:
    where = _id(path)
    assert (
        core_violations(path.read_text(), module_name(path), where, path.name == "__init__.py")
        == []
    )


@pytest.mark.parametrize("path", SHELL_FILES, ids=_id)
def test_a_shell_imports_no_trio_and_no_cli(path: Path) -> None:
    tree = ast.parse(path.read_text())
    bad = [
        f"{_id(path)}:{line}: {name}"
        for line, name in imported(tree, module_name(path), path.name == "__init__.py")
        if name.split(".")[0] == "trio"
        or any(_under(name, m) for m in ("exedra_engine._trio", "exedra_engine.cli"))
    ]
    assert bad == []


# -- the checker itself catches what it must ------------------------------------------------

CORE_MODULE = "exedra_engine._core.plan.planner"


@pytest.mark.parametrize(
    ("source", "flagged"),
    [
        ("import os\n", "os: effectful"),
        ("import os.path\n", "os.path: effectful"),
        ("from os import path\n", "os: effectful"),
        ("from exedra_engine._trio import launcher\n", "exedra_engine._trio.launcher: a layer"),
        ("from exedra_engine import _shell\n", "exedra_engine._shell: a layer"),
        ("from exedra_engine import Kind\n", "exedra_engine.Kind: not a core module"),
        ("from ... import cli\n", "exedra_engine.cli: a layer"),
        ("from ...testing import write_tiny_llama\n", "exedra_engine.testing.write_tiny_llama"),
        ("def f():\n    import subprocess\n", "2: subprocess: effectful"),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pathlib\n",
            "3: pathlib: effectful",
        ),
        ("import sys\n", "sys: effectful"),
        ("import pickle\n", "pickle: not on the pure allow-list"),
        ("m = __import__('socket')\n", "socket: effectful"),
        ("import importlib\nm = importlib.import_module('trio')\n", "trio: effectful"),
        ("m = __import__(name)\n", "<dynamic>"),
        ("data = open('x').read()\n", "open(): effectful builtin"),
    ],
)
def test_the_checker_flags_a_violation(source: str, flagged: str) -> None:
    found = core_violations(source, CORE_MODULE)
    assert any(flagged in v for v in found), found


def test_the_checker_passes_a_pure_module() -> None:
    source = (
        "from __future__ import annotations\n"
        "import re\nimport struct\nfrom collections.abc import Sequence\n"
        "import msgspec\nimport yaml\nfrom returns.result import Success\n"
        "from exedra_engine._core.executors.kinds import Kind\nfrom . import _flagdata\n"
        "from exedra_engine.errors import PlanError\n"
        "from exedra_engine.constants import DEFAULT_HOST\n"
        "def f():\n    from exedra_engine._core.values import LaunchPlan\n"
    )
    assert core_violations(source, CORE_MODULE) == []


def test_an_exception_is_per_module() -> None:
    source = "from exedra_engine._sysconf import CONFIG_PATH\n"
    assert core_violations(source, "exedra_engine.constants", "exedra_engine/constants.py") == []
    assert core_violations(source, CORE_MODULE, "exedra_engine/_core/plan/planner.py")
