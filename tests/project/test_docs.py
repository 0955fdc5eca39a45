"""Every code example in README.md and docs/ runs: Python blocks are executed (the blocks of one
page share a namespace, like a doctest), YAML blocks must load as override files, and the
`exedra-engine` command lines of shell blocks must succeed.

Model paths in the examples are replaced with a generated tiny model, and the executors come
from the project cache, so the examples run for real."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from exedra_engine import config_from_yaml
from tests.conftest import outside_tmp

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
MODEL_PATHS = (
    "/var/lib/exedra/models/qwen/current/model.gguf",
    "/var/lib/exedra/models/qwen/model.gguf",
)


# The how-to of each emit target, and the file its commands write and the test validates.
EMIT_PAGES = {"kubernetes.md": "qwen.yaml", "systemd.md": "qwen.service", "quadlet.md": ""}


def blocks(page: Path, lang: str) -> list[str]:
    return [body for kind, body in BLOCK.findall(page.read_text()) if kind == lang]


def test_every_page_has_been_found() -> None:
    assert len(PAGES) >= 9
    assert sum(len(blocks(p, "python")) for p in PAGES) >= 6


@pytest.mark.parametrize(
    "page", [p for p in PAGES if blocks(p, "python")], ids=lambda p: str(p.relative_to(ROOT))
)
def test_python_examples_run(
    page: Path, tiny_llama: Path, llama_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{Path(llama_server).parent}{os.pathsep}{os.environ['PATH']}")
    namespace: dict[str, object] = {"__name__": "__docs__"}
    for body in blocks(page, "python"):
        for p in MODEL_PATHS:
            body = body.replace(p, str(tiny_llama))
        exec(compile(body, str(page), "exec"), namespace)


@pytest.mark.parametrize(
    "page", [p for p in PAGES if blocks(p, "yaml")], ids=lambda p: str(p.relative_to(ROOT))
)
def test_yaml_examples_are_valid_overrides(page: Path) -> None:
    for body in blocks(page, "yaml"):
        config_from_yaml(body, str(page)).unwrap()


# What a shell block may call that CI cannot run, and why; everything else runs as written.
STUBBED = {
    "./dev": "the set-up itself: CI runs it as its own job",
    "pip": "installs from a package index",
    "kubectl": "needs a cluster",
    "python -m build": "builds the wheel: CI's packaging job",
}
_PRELUDE = """set -euo pipefail
stubbed() { printf '%s\\n' "$*" >> "$STUBBED_LOG"; }
pip() { stubbed pip "$@"; }
kubectl() { stubbed kubectl "$@"; }
python() {
    if [ "${1-} ${2-}" = "-m build" ]; then stubbed python "$@"; else command python "$@"; fi
}
"""


def _shell_script(page: Path) -> str:
    """A page's sh and bash blocks as one script, in order, as a reader would paste them."""
    lines = []
    for kind, body in BLOCK.findall(page.read_text()):
        if kind not in ("sh", "bash"):
            continue
        for line in body.splitlines():
            lines.append(
                f"stubbed {line}" if line.startswith("./dev ") or line == "./dev" else line
            )
    return "\n".join(lines)


def _commands(page: Path) -> list[str]:
    """The exedra-engine command lines of a page's shell blocks."""
    text = _shell_script(page).replace("\\\n", " ")
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith("exedra-engine ")]


def _validate_outputs(root: Path) -> list[str]:
    """What the pages' commands wrote, checked as the tests check emitted files: manifests
    with kubernetes-validate --strict, units with systemd-analyze verify (nothing on stderr)."""
    import subprocess
    import sys

    import kubernetes_validate
    import yaml

    checked = []
    for f in sorted(root.rglob("*.yaml")):
        if "engine.d" in f.parts:
            continue
        for doc in yaml.safe_load_all(f.read_text()):
            if doc:
                kubernetes_validate.validate(doc, "1.35", strict=True)
        checked.append(f.name)
    for f in sorted(root.rglob("*.service")):
        # the readiness waiter the page names must exist on the checking host: this Python
        f.write_text(f.read_text().replace("/usr/bin/exedra-engine", sys.executable))
        r = subprocess.run(
            ["systemd-analyze", "verify", str(f)], capture_output=True, text=True, check=False
        )
        assert (r.returncode, r.stderr) == (0, ""), (f, r.stderr)
        checked.append(f.name)
    return checked


def _fixture_dir(root: Path) -> None:
    """What the pages assume a reader has: the override directory committed in the
    repository that deploys /etc/exedra/engine.d (lint-overrides.md's CI job), a git clone.
    What a page's commands use beyond that (deploy/engine.d, a key file, node files) its own
    blocks create, as a reader would have to."""
    import subprocess

    d = root / "etc/exedra/engine.d"
    d.mkdir(parents=True)
    (d / "10-site.yaml").write_text("models:\n  qwen:\n    args: [--ctx-size, '8192']\n")
    (root / "ci").mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)


def _docs_model_dir() -> Path:
    """Where the pages' model is put: where a systemd unit's DynamicUser= can reach it (not
    under /tmp, which the unit sees privately; every directory on the way open to others):
    the clone's own cache, unless the clone itself is under /tmp (a CI checkout may be)."""
    return outside_tmp("docs-models")


def _reachable_waiter() -> str:
    """A directory holding an `exedra-engine` that execs this venv's: a unit's readiness hook
    runs the command found on PATH, and this venv may be under /tmp, hidden from the unit."""
    bindir = _docs_model_dir().parent / "docs-bin"
    bindir.mkdir(parents=True, exist_ok=True)
    wrapper = bindir / "exedra-engine"
    real = Path(sys.executable).parent / "exedra-engine"
    wrapper.write_text(f'#!/bin/sh\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    return str(bindir)


def _reachable_copy(binary: str) -> str:
    """`binary`'s build directory (it loads its libraries from beside it) copied beside the
    docs' model, once per build: the path of the copy's binary."""
    real = Path(os.path.realpath(binary))
    dest = _docs_model_dir().parent / "docs-executors" / real.parent.name
    if not (dest / real.name).exists():
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(real.parent, tmp, symlinks=True)
        tmp.rename(dest)
    return str(dest / real.name)


@pytest.mark.parametrize(
    "page", [p for p in PAGES if _shell_script(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_shell_examples_succeed(
    page: Path, tiny_llama: Path, tmp_path: Path, llama_server: str, whisper_server: str
) -> None:
    # issue 18 item 15: the blocks run as a script under bash -e -o pipefail, as written: the
    # variables they use are set by them, the files they read are the fixture's, and only the
    # commands in STUBBED (named in the log) are not run.
    import subprocess
    import sys

    script = _shell_script(page)
    model = _docs_model_dir() / "tiny.gguf"
    model.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_llama, model)
    for p in MODEL_PATHS:
        script = script.replace(p, str(model))
    # The pages name the binaries where a distribution installs them; a systemd unit's
    # DynamicUser= must reach the one the plan names, as systemd.md's install step makes
    # sure: a copy of the build beside the docs' model, not the user's 0700 home cache.
    llama_server = _reachable_copy(llama_server)
    whisper_server = _reachable_copy(whisper_server)  # a group's whisper member's unit, too
    script = script.replace("/usr/bin/llama-server", llama_server)
    script = script.replace("/usr/bin/whisper-server", whisper_server)
    _fixture_dir(tmp_path)
    log = tmp_path / "stubbed.log"
    bins = [_reachable_waiter(), str(Path(sys.executable).parent), str(Path(llama_server).parent)]
    bins.append(str(Path(whisper_server).parent))
    env = {k: v for k, v in os.environ.items() if k != "QWEN_KEY"}
    env.update(STUBBED_LOG=str(log), PATH=os.pathsep.join([*bins, os.environ["PATH"]]))
    env["HOME"] = str(tmp_path / "home")  # what a page installs under ~ stays in the test
    r = subprocess.run(
        ["bash", "-c", _PRELUDE + script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert r.returncode == 0, (page.name, r.stderr[-3000:])
    for called in log.read_text().splitlines() if log.exists() else []:
        assert any(called.startswith(k) for k in STUBBED), called
    if page.name in EMIT_PAGES:
        want = [EMIT_PAGES[page.name]] if EMIT_PAGES[page.name] else []
        assert _validate_outputs(tmp_path) == want
        assert any(" --check" in c for c in _commands(page)), "the page validates its output"


def _python_module(page: Path) -> str:
    """A page's Python blocks as one module: they share a namespace when run."""
    return "\n\n".join(blocks(page, "python"))


def test_python_examples_pass_mypy_strict(tmp_path: Path) -> None:
    import subprocess
    import sys

    files = []
    for page in PAGES:
        if blocks(page, "python"):
            name = re.sub(r"\W", "_", str(page.relative_to(ROOT)))
            f = tmp_path / f"{name}.py"
            f.write_text(_python_module(page))
            files.append(str(f))
    (tmp_path / "mypy.ini").write_text("[mypy]\n")
    r = subprocess.run(
        [
            *(sys.executable, "-m", "mypy", "--strict"),
            *("--config-file", str(tmp_path / "mypy.ini")),
            *("--cache-dir", str(ROOT / ".mypy_cache"), *files),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "MYPYPATH": str(ROOT / "src")},
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def _ci_steps(page: Path) -> list[str]:
    """The ``run:`` scripts of the GitHub workflows a page shows."""
    import yaml

    out = []
    for body in blocks(page, "yml"):
        for job in yaml.safe_load(body).get("jobs", {}).values():
            out += [s["run"] for s in job.get("steps", []) if "run" in s]
    return out


@pytest.mark.parametrize(
    "page", [p for p in PAGES if _ci_steps(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_ci_job_steps_run_on_the_minimum_python(
    page: Path, tmp_path: Path, llama_server: str, whisper_server: str
) -> None:
    # The job runs "in the image the hosts run": its python3 may be the project's minimum,
    # 3.11, which this test runs under (an f-string with nested quotes needs 3.12).
    import subprocess
    import sys

    assert sys.version_info[:2] >= (3, 11)
    _fixture_dir(tmp_path)
    # A finding, so that the annotation step has something to print.
    (tmp_path / "etc/exedra/engine.d/20-typo.yaml").write_text(
        "engines:\n  llama:\n    args: [--ctx-szie, '1']\n"
    )
    for script in _ci_steps(page):
        script = script.replace("/usr/bin/llama-server", llama_server)
        script = script.replace("/usr/bin/whisper-server", whisper_server)
        env = {
            **os.environ,
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
        }
        r = subprocess.run(
            ["bash", "-e", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert "SyntaxError" not in r.stderr, r.stderr
        # The job fails on the finding (its exit status is config --check's), annotated.
        assert r.returncode == 1, r.stderr
        assert r.stdout.startswith("::error file=etc/exedra/engine.d/20-typo.yaml,line=3,")


def test_readme_says_what_unwrap_raises() -> None:
    # `.unwrap()` raises returns' UnwrapFailedError (empty str()), never the EngineError,
    # which it carries: `except EngineError` around an unwrap catches nothing.
    from returns.primitives.exceptions import UnwrapFailedError

    import exedra_engine as engine

    hw = engine.Hardware(cpu=engine.CPU(threads=2))  # no executor: a planning failure
    spec = engine.ModelSpec(id="m", path="/m.gguf", kind=engine.Kind.LLAMA)
    result = engine.plan_launch(spec, hw, engine.Constraints(), model=None, ports_in_use=set())
    with pytest.raises(UnwrapFailedError) as raised:
        result.unwrap()
    assert not isinstance(raised.value, engine.EngineError)
    carried = raised.value.halted_container.failure()
    assert isinstance(carried, engine.EngineError) and carried is result.failure()
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "`.unwrap()` raises the typed `EngineError`" not in readme
    assert "raises returns' `UnwrapFailedError`, not the `EngineError`" in readme
    assert "`e.halted_container.failure()`" in readme


def test_every_page_is_in_the_site_nav() -> None:
    # a page left out of mkdocs.yml's nav is built but reached by no link of the site
    import yaml

    def pages(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, list):
            return [p for item in nav for p in pages(item)]
        if isinstance(nav, dict):
            return [p for v in nav.values() for p in pages(v)]
        return []

    site = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    listed = set(pages(site["nav"]))
    on_disk = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert on_disk - listed == set()
    assert "compared.md" in listed
