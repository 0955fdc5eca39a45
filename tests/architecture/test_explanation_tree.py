"""docs/explanation.md matches the tree (issue 20): every module of the package is named in
it, and every module it names exists. A module added, moved or removed without its line in the
explanation fails here, not in a reader's hands."""

from __future__ import annotations

import re
from pathlib import Path

from tests.architecture.test_tree_shape import FLOORS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "src" / "exedra_engine"
PAGE = ROOT / "docs" / "explanation.md"
# Not design: the build writes _version.py; __init__/__main__ are named by their package.
UNNAMED = frozenset({"__init__.py", "__main__.py", "_version.py"})


def _modules() -> set[str]:
    return {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name not in UNNAMED and "__pycache__" not in p.parts
    }


def _named(text: str) -> set[str]:
    return set(re.findall(r"[\w/]*\w+\.py\b", text))


def _names(name: str, module: str) -> bool:
    # The page names a module by its path under the package, or by its tail where its
    # section says the folder (``emit/shape.py``, ``flags.py`` in the ``_core/`` table).
    return module == name or module.endswith("/" + name)


def test_every_module_is_in_the_explanation() -> None:
    text = PAGE.read_text()
    named = _named(text)
    missing = sorted(m for m in _modules() if not any(_names(n, m) for n in named))
    assert missing == [], f"docs/explanation.md does not name: {missing}"


def test_every_module_the_explanation_names_exists() -> None:
    modules = _modules()
    basenames = {Path(m).name for m in modules} | UNNAMED
    elsewhere = {p.name for p in ROOT.glob("*/**/*.py") if ".venv" not in p.parts}
    gone = sorted(
        n
        for n in _named(PAGE.read_text())
        if n not in modules and Path(n).name not in basenames and Path(n).name not in elsewhere
    )
    assert gone == [], f"docs/explanation.md names modules that do not exist: {gone}"


def _floors_table(text: str) -> list[tuple[str, frozenset[str]]]:
    """The rows of the page's floors table, top to bottom: (floor, rooms as `FLOORS` names)."""
    section = text.split("### The floors", 1)[1].split("\n###", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or cells[0] in ("floor", "---"):
            continue
        rooms = set()
        for path in re.findall(r"`([^`]+)`", cells[1]):
            if path == "__init__.py":
                rooms.add("exedra_engine")
                continue
            path = path.removesuffix("/").removesuffix("/__init__.py").removesuffix(".py")
            rooms.add(path.replace("/", "."))
        rows.append((cells[0], frozenset(rooms)))
    return rows


def test_the_floors_drawn_are_the_floors_tested() -> None:
    drawn = _floors_table(PAGE.read_text())
    assert drawn, "docs/explanation.md has no floors table"
    assert drawn == list(reversed(FLOORS))


def test_the_floors_table_is_read_as_written() -> None:
    text = "### The floors\n| floor | rooms |\n| --- | --- |\n| a | `_core/plan/`, `x.py` |\n"
    text += "| b | `__init__.py` (`exedra_engine`), `_core/__init__.py` |\n### next\n| c | `y` |\n"
    assert _floors_table(text) == [
        ("a", frozenset({"_core.plan", "x"})),
        ("b", frozenset({"exedra_engine", "_core"})),
    ]
