"""Issue 20: the seams between the CLI, the shells and the core, where each part passed its
own tests and the two together crashed."""

from __future__ import annotations

from pathlib import Path

import msgspec

from exedra_engine._shell.probe import probe
from tests.conftest import Run, host

MODEL = "/var/lib/exedra/models/qwen/model.gguf"


def _hardware_file(tmp_path: Path, tree: str = "nvidia") -> Path:
    f = tmp_path / f"{tree}.json"
    f.write_bytes(msgspec.json.encode(probe(host(tree)).unwrap()))
    return f


def test_i20_item1_plan_emit_with_a_config_file(tmp_path: Path, run: Run) -> None:
    # The CLI spread a positional (spec, hw, constraints, files) into plan_explained, whose
    # fourth parameter is the HostFiles port: with any override file, `plan --emit` crashed.
    conf = tmp_path / "conf.yaml"
    conf.write_text("env: {EXEDRA_MARK: from-config}\nengines: {llama: {args: [-c, '512']}}\n")
    hw = _hardware_file(tmp_path)
    for target in ("k8s", "systemd", "quadlet"):
        r = run(
            "plan",
            "--model",
            MODEL,
            "--kind",
            "llama",
            "--hardware",
            str(hw),
            "--host",
            "0.0.0.0",
            "--port",
            "8080",
            "--no-port-check",
            "--config",
            str(conf),
            "--emit",
            target,
        )
        assert r.code == 0, (target, r.err)
        assert "Traceback" not in r.err
        # The override reached the emitted files: the config was planned with, not dropped.
        assert "from-config" in r.out, target
        assert "512" in r.out, target
