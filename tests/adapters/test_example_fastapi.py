"""examples/fastapi_app.py, run as a user would (issue 23 item 5): uvicorn on loopback, a
chat request through the launched executor, and nothing left after shutdown."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import psutil
import pytest

from exedra_engine.testing import free_port
from tests.adapters.uvicorn_app import served

pytestmark = [pytest.mark.executor, pytest.mark.slow]


def _executors(pid: int) -> list[psutil.Process]:
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [k for k in kids if "llama-server" in " ".join(k.cmdline())]


@pytest.mark.parametrize("stop_with", [signal.SIGINT, signal.SIGTERM])
def test_fastapi_app_answers_and_leaves_nothing(
    llama_server: str, real_model: Path, stop_with: signal.Signals, tmp_path: Path
) -> None:
    port = free_port()
    # the admin's overrides reach the example's plan, as the README's example loads them
    config = tmp_path / "engine.d"
    config.mkdir()
    (config / "10-sampling.yaml").write_text("engines:\n  llama:\n    args: [--top-k, '7']\n")
    env = {
        **os.environ,
        "EXEDRA_MODEL": str(real_model),
        "EXEDRA_CTX": "512",
        "EXEDRA_CONFIG": str(config),
        # probe() finds the executor on PATH, as it would on a user's machine.
        "PATH": f"{Path(llama_server).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    with served("fastapi_app:app", env, port, _executors) as app:
        # uvicorn says so once the lifespan (the model's launch) is through.
        assert app.started(300), "uvicorn never started:\n" + app.tail()
        server = app.process
        executors = _executors(server.pid)
        assert len(executors) == 1, executors
        r = httpx.post(
            f"http://127.0.0.1:{port}/chat",
            json={"message": "Say hi.", "max_tokens": 8},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        assert r.json()["answer"].strip()
        # The base model (no chat template) answers a completion sensibly.
        r = httpx.post(
            f"http://127.0.0.1:{port}/complete",
            json={"prompt": "The capital of France is the city of"},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        assert "Paris" in r.json()["answer"], r.text
        argv = executors[0].cmdline()
        assert argv[argv.index("--top-k") + 1] == "7"  # the config layer
        # The executor takes no request that does not come through the application.
        url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"
        assert httpx.post(url + "/v1/chat/completions", json={}).status_code == 401
        server.send_signal(stop_with)
        # uvicorn shuts down gracefully, then dies by the signal it got (as it should).
        assert app.ended(60) in (0, -stop_with), app.tail()
        assert any("Application shutdown complete" in line for line in app.seen)
        _, left = psutil.wait_procs(executors, timeout=0.5)
        assert left == [], "the executor outlived the application"
        # Nor anything of its process group (its pid is the group's id).
        with pytest.raises(ProcessLookupError):
            os.killpg(executors[0].pid, 0)
