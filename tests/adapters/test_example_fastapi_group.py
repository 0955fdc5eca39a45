"""examples/fastapi_group_app.py, run as a user would: uvicorn on loopback, a completion from
the llama member and a transcription from the whisper member, both launched as one group by
the application, and nothing left after shutdown."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import httpx
import psutil
import pytest

from exedra_engine.testing import free_port
from tests.adapters.uvicorn_app import ROOT, served

pytestmark = [pytest.mark.executor, pytest.mark.slow]


def _executors(pid: int) -> dict[str, psutil.Process]:
    """The application's executors, by binary name."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return {}
    out = {}
    for k in kids:
        name = os.path.basename(k.cmdline()[0]) if k.cmdline() else ""
        if name in ("llama-server", "whisper-server"):
            out[name] = k
    return out


def test_fastapi_group_app_answers_from_both_members_and_leaves_nothing(
    llama_server: str, whisper_server: str, tiny_llama: Path, tiny_whisper: Path, wav: Path
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "EXEDRA_MODEL": str(tiny_llama),
        "EXEDRA_WHISPER_MODEL": str(tiny_whisper),
        "EXEDRA_CTX": "256",  # the tiny model's own
        "EXEDRA_CONFIG": str(ROOT / "no-such-engine.d"),  # no admin overrides
        # probe() finds the executors on PATH, as it would on a user's machine.
        "PATH": os.pathsep.join(
            [str(Path(llama_server).parent), str(Path(whisper_server).parent), os.environ["PATH"]]
        ),
    }
    with served("fastapi_group_app:app", env, port, lambda pid: _executors(pid).values()) as app:
        assert app.started(300), "uvicorn never started:\n" + app.tail()
        server = app.process
        executors = _executors(server.pid)
        assert sorted(executors) == ["llama-server", "whisper-server"], executors
        url = f"http://127.0.0.1:{port}"
        r = httpx.post(url + "/complete", json={"prompt": "Hello", "max_tokens": 4}, timeout=120)
        assert r.status_code == 200, r.text
        assert isinstance(r.json()["answer"], str)
        audio = wav.read_bytes()
        r = httpx.post(url + "/transcribe", content=audio, timeout=120)
        assert r.status_code == 200, r.text
        assert isinstance(r.json()["text"], str)
        assert httpx.post(url + "/transcribe", content=b"", timeout=30).status_code == 400
        # Each member has its own port; the chat model takes no request that does not
        # come through the application.
        chat = executors["llama-server"].cmdline()
        asr = executors["whisper-server"].cmdline()
        ports = {a[a.index("--port") + 1] for a in (chat, asr)}
        assert len(ports) == 2 and str(port) not in ports
        chat_url = f"http://127.0.0.1:{chat[chat.index('--port') + 1]}"
        assert httpx.post(chat_url + "/v1/completions", json={}).status_code == 401
        server.send_signal(signal.SIGTERM)
        assert app.ended(60) in (0, -signal.SIGTERM), app.tail()
        assert any("Application shutdown complete" in line for line in app.seen)
        _, left = psutil.wait_procs(list(executors.values()), timeout=0.5)
        assert left == [], "an executor outlived the application"
        for p in executors.values():
            with pytest.raises(ProcessLookupError):
                os.killpg(p.pid, 0)
