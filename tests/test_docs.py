"""Every code example in README.md and docs/ runs: Python blocks are executed (the blocks of one
page share a namespace, like a doctest), YAML blocks must load as override files, and the
`exedra-engine` command lines of shell blocks must succeed.

Model paths in the examples are replaced with a generated tiny model, and the executors come
from the project cache, so the examples run for real."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

from exedra_engine import config_from_yaml
from tests.conftest import cli

ROOT = Path(__file__).resolve().parent.parent
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
    page: Path, tiny_llama: Path, real_hw: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{ROOT / '.cache' / 'executors' / 'bin'}:{os.environ['PATH']}")
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


def _commands(page: Path) -> list[str]:
    """The exedra-engine command lines of a page's sh blocks, each with its ``> FILE``."""
    out = []
    for body in blocks(page, "sh"):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("exedra-engine ") and line.split()[1] != "launch":
                out.append(line)
    return out


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


@pytest.mark.parametrize(
    "page", [p for p in PAGES if _commands(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_shell_examples_succeed(
    page: Path,
    tiny_llama: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deploy = tmp_path / "deploy" / "engine.d"
    deploy.mkdir(parents=True)
    (deploy / "10-site.yaml").write_text("models:\n  qwen:\n    args: [--ctx-size, '8192']\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("QWEN_KEY", "k")
    monkeypatch.setenv("PATH", f"{ROOT / '.cache' / 'executors' / 'bin'}:{os.environ['PATH']}")
    # The model outside /tmp: a systemd unit's DynamicUser= gets a private /tmp, where a
    # model would not exist, so the emitter refuses one there.
    model = ROOT / ".cache" / "docs-models" / "tiny.gguf"
    model.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(tiny_llama, model)
    for line in _commands(page):
        for p in MODEL_PATHS:
            line = line.replace(p, str(model))
        command, _, redirect = line.partition(" > ")
        code, out, err = cli(*shlex.split(command)[1:])
        assert code == 0, (line, err)
        if redirect:
            (tmp_path / redirect.strip()).write_text(out)
    if page.name in EMIT_PAGES:
        want = [EMIT_PAGES[page.name]] if EMIT_PAGES[page.name] else []
        assert _validate_outputs(tmp_path) == want
        assert any(" --check" in c for c in _commands(page)), "the page validates its output"
