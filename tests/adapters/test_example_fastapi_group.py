"""examples/fastapi_group_app.py, run as a user would: uvicorn on loopback, a completion from
the llama member and a transcription from the whisper member, both launched as one group by
the application, and nothing left after shutdown."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import httpx
import psutil
import pytest

from exedra_engine.testing import free_port

pytestmark = [pytest.mark.executor, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


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
    argv = ["--app-dir", "examples", "fastapi_group_app:app", "--host", "127.0.0.1"]
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", *argv, "--port", str(port)],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert server.stderr is not None
    seen: list[str] = []
    started = threading.Event()

    def read(stream: IO[str]) -> None:
        # Read all along: the executors' log lines go to the same pipe, which must not fill.
        for line in stream:
            seen.append(line)
            if "Application startup complete" in line:
                started.set()
        started.set()

    reader = threading.Thread(target=read, args=(server.stderr,))
    reader.start()
    try:
        started.wait(300)
        assert server.poll() is None, "uvicorn never started:\n" + "".join(seen[-20:])
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
        # Each member has its own CPUs and port; the chat model takes no request that does
        # not come through the application.
        chat = executors["llama-server"].cmdline()
        asr = executors["whisper-server"].cmdline()
        ports = {a[a.index("--port") + 1] for a in (chat, asr)}
        assert len(ports) == 2 and str(port) not in ports
        chat_url = f"http://127.0.0.1:{chat[chat.index('--port') + 1]}"
        assert httpx.post(chat_url + "/v1/completions", json={}).status_code == 401
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        reader.join()
        assert server.returncode in (0, -signal.SIGTERM), "".join(seen[-20:])
        assert any("Application shutdown complete" in line for line in seen)
        _, left = psutil.wait_procs(list(executors.values()), timeout=0.5)
        assert left == [], "an executor outlived the application"
        for p in executors.values():
            with pytest.raises(ProcessLookupError):
                os.killpg(p.pid, 0)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        for p in _executors(server.pid).values():
            p.kill()
        reader.join()
