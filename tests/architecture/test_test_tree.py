"""The tests are grouped by the part of the source they test, as the source is: a test module
lives in a concept folder (``tests/plan/``, ``tests/secrets/``, ...), never directly in
``tests/`` where a new one would start a second, flat tree; each folder is a package (two
folders may then hold modules of one name) and holds at most a dozen test modules, as a source
folder does (tests/architecture/test_tree_shape.py). ``tests/`` itself keeps the shared helpers:
conftest.py, whose fixtures reach every folder below it, the fake executor and the fixtures."""

from __future__ import annotations

from pathlib import Path

from tests.architecture.test_tree_shape import MAX_MODULES_PER_FOLDER

TESTS = Path(__file__).resolve().parents[1]


def misplaced(tests: Path) -> list[str]:
    """What breaks the layout under TESTS: a test module directly in it, a folder of tests
    that is not a package, a folder with more than `MAX_MODULES_PER_FOLDER` test modules."""
    found = [f"{p.name}: directly in tests/" for p in sorted(tests.glob("test_*.py"))]
    folders = sorted({p.parent for p in tests.rglob("test_*.py")} - {tests})
    for folder in folders:
        where = folder.relative_to(tests)
        if not (folder / "__init__.py").is_file():
            found.append(f"{where}/: no __init__.py")
        n = len(list(folder.glob("test_*.py")))
        if n > MAX_MODULES_PER_FOLDER:
            found.append(f"{where}/: {n} test modules, more than {MAX_MODULES_PER_FOLDER}")
    return found


def test_every_test_module_is_in_a_concept_folder() -> None:
    assert len(list(TESTS.rglob("test_*.py"))) > 50  # the suite, not an empty glob
    assert misplaced(TESTS) == []


def test_a_flat_test_an_unpackaged_folder_and_a_crowded_one_are_found(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("")
    (tmp_path / "test_new.py").write_text("")
    (tmp_path / "loose").mkdir()
    (tmp_path / "loose" / "test_a.py").write_text("")
    crowd = tmp_path / "crowd"
    crowd.mkdir()
    (crowd / "__init__.py").write_text("")
    for i in range(MAX_MODULES_PER_FOLDER + 1):
        (crowd / f"test_{i}.py").write_text("")
    fine = tmp_path / "fine"
    fine.mkdir()
    (fine / "__init__.py").write_text("")
    (fine / "test_b.py").write_text("")
    assert misplaced(tmp_path) == [
        "test_new.py: directly in tests/",
        f"crowd/: {MAX_MODULES_PER_FOLDER + 1} test modules, more than {MAX_MODULES_PER_FOLDER}",
        "loose/: no __init__.py",
    ]
