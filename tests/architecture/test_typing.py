"""The typed surface as a client sees it: strict mypy accepts real use of the public API and
rejects a misspelt name (no module-level Any)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLIENT = """
import sys
import trio
import exedra_engine as engine
from returns.result import Result


async def main() -> None:
    hw: engine.Hardware = engine.probe().unwrap()
    spec = engine.ModelSpec(id="q", path="/m.gguf", kind=engine.Kind.LLAMA)
    cfg: engine.Config = engine.load_config(None).unwrap()
    r: Result[engine.LaunchPlan, engine.EngineError] = engine.plan(
        spec, hw, engine.Constraints(api_key="k", overrides=cfg))
    plan = r.unwrap()
    url: str = plan.url
    async with engine.open_instance(plan, logs=sys.stderr) as inst:
        ep: engine.Endpoint = inst.endpoint
        reason: engine.ExitReason = await inst.stop(engine.STOP_TIMEOUT)
        clean: bool = reason.clean
    async with trio.open_nursery() as n:
        started = await engine.launch(n, plan)
        info: engine.ModelInfo = engine.inspect("/m.gguf").unwrap()
"""


def mypy(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    f = tmp_path / "client.py"
    f.write_text(source)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--warn-unused-ignores",
            str(f),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )


def test_a_strict_client_type_checks(tmp_path: Path) -> None:
    r = mypy(tmp_path, CLIENT)
    assert r.returncode == 0, r.stdout


def test_a_misspelt_name_is_a_type_error(tmp_path: Path) -> None:
    r = mypy(tmp_path, "import exedra_engine as engine\nengine.plann\n")
    assert r.returncode == 1 and 'Module has no attribute "plann"' in r.stdout
