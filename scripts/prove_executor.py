#!/usr/bin/env python3
"""Prove that an executor binary runs on this CPU: load a tiny model, answer one request.

    prove_executor.py llama|whisper BINARY [--wrap 'qemu-x86_64 -cpu Nehalem-v2'] [--timeout S]

`--version` proves nothing (it runs no CPU kernel); a model load and one request do. On success
prints one line, `variant=<ggml CPU plugin> ready=<s> answer=<s>`, and exits 0. On failure says
why on stderr and exits 1; a binary killed by SIGILL "was built for instructions this CPU lacks".
Also imported by tests/executors/test_portability.py, which runs the binaries under qemu's CPU
models.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

VARIANT = re.compile(r"libggml-cpu-([A-Za-z0-9_.]+)\.so")


@dataclass
class Proof:
    ok: bool
    why: str
    variant: str | None
    ready_s: float
    answer_s: float
    log: str

    def line(self) -> str:
        return (
            f"variant={self.variant or '?'} ready={self.ready_s:.2f}s answer={self.answer_s:.2f}s"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _post(url: str, body: bytes, ctype: str, timeout: float) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": ctype}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()


def _multipart(field: str, name: str, data: bytes) -> tuple[bytes, str]:
    b = uuid.uuid4().hex
    body = (
        f'--{b}\r\nContent-Disposition: form-data; name="{field}"; filename="{name}"\r\n'
        "Content-Type: audio/wav\r\n\r\n"
    ).encode() + data
    fmt = 'Content-Disposition: form-data; name="response_format"'
    body += f"\r\n--{b}\r\n{fmt}\r\n\r\njson".encode()
    body += f"\r\n--{b}--\r\n".encode()
    return body, f"multipart/form-data; boundary={b}"


def _died(code: int) -> str:
    if code == -signal.SIGILL:
        return (
            "killed by SIGILL: it was built for instructions this CPU lacks "
            "(rebuild it with scripts/install-executors.sh, which builds every CPU variant)"
        )
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def prove(
    kind: str,
    binary: str,
    *,
    wrap: list[str] | None = None,
    timeout: float = 60.0,
    model: str | None = None,
) -> Proof:
    """Start BINARY (under WRAP, e.g. qemu) on a tiny model and make it answer one request."""
    with tempfile.TemporaryDirectory(prefix="exedra-prove-") as tmp:
        d = Path(tmp)
        port = _free_port()
        logf = d / "log"
        base = f"http://127.0.0.1:{port}"
        t0 = time.monotonic()
        with logf.open("wb") as out:
            proc = subprocess.Popen(
                [*(wrap or []), binary, *_args(kind, d, port, model)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        answered = 0.0
        try:
            deadline = t0 + timeout
            why, ready, mapped = _wait_ready(proc, base, t0, deadline, timeout)
            if not why:
                t1 = time.monotonic()
                why = _ask(kind, d, base, proc, max(5.0, deadline - t1))
                answered = time.monotonic() - t1
        finally:
            _stop(proc)
        text = logf.read_text(errors="replace")
    found = VARIANT.findall(mapped) or VARIANT.findall(text)
    return Proof(not why, why, found[-1] if found else None, ready, answered, text)


def _args(kind: str, d: Path, port: int, model: str | None) -> list[str]:
    from exedra_engine.testing import write_tiny_llama, write_tiny_whisper

    listen = ["--host", "127.0.0.1", "--port", str(port)]
    if kind == "llama":
        # Q8_0 weights: the load runs the int8 kernels (VNNI, AMX) where a plugin built for
        # instructions the CPU lacks dies; an F32 model passes on such a binary.
        m = Path(model) if model else write_tiny_llama(d / "tiny.gguf", quantized=True)
        return ["-m", str(m), *listen, "-c", "256", "-t", "1", "-np", "1"]
    if kind == "whisper":
        m = Path(model) if model else write_tiny_whisper(d / "tiny-whisper.bin")
        return ["-m", str(m), *listen, "-t", "1"]
    raise ValueError(f"unknown kind {kind!r}")


def _wait_ready(
    proc: subprocess.Popen[bytes], base: str, t0: float, deadline: float, timeout: float
) -> tuple[str, float, str]:
    """Why it never got ready ("" once it did), when it did, and its memory map then."""
    while True:
        code = proc.poll()
        if code is not None:
            return _died(code) + " before it was ready", 0.0, ""
        if time.monotonic() > deadline:
            return f"not ready after {timeout:.0f} s", 0.0, ""
        try:
            if _get(base + "/health", 2.0) == 200:
                ready = time.monotonic() - t0
                # Which CPU plugin ggml loaded: the one mapped into the process (the log
                # says so only at a higher verbosity). Under qemu-user it is qemu's pid.
                mapped = ""
                with contextlib.suppress(OSError):
                    mapped = Path(f"/proc/{proc.pid}/maps").read_text()
                return "", ready, mapped
        except OSError:
            pass
        time.sleep(0.05)


def _ask(kind: str, d: Path, base: str, proc: subprocess.Popen[bytes], left: float) -> str:
    """One real request; why it failed, or ""."""
    from exedra_engine.testing import write_wav

    try:
        if kind == "llama":
            body = json.dumps({"prompt": "hello", "n_predict": 4}).encode()
            status, resp = _post(base + "/completion", body, "application/json", left)
            good = status == 200 and "content" in json.loads(resp)
        else:
            wav = write_wav(d / "tone.wav", seconds=1.0).read_bytes()
            body, ctype = _multipart("file", "tone.wav", wav)
            status, resp = _post(base + "/inference", body, ctype, left)
            good = status == 200 and "text" in json.loads(resp)
    except (OSError, ValueError) as e:
        code = proc.poll()
        return (_died(code) if code is not None else f"request failed: {e}") + " while answering"
    return "" if good else f"answered {status}: {resp[:200]!r}"


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", choices=["llama", "whisper"])
    ap.add_argument("binary")
    ap.add_argument("--wrap", default="", help="a command to run the binary under (qemu)")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--model", help="a model to load instead of the generated tiny one")
    a = ap.parse_args()
    p = prove(a.kind, a.binary, wrap=shlex.split(a.wrap), timeout=a.timeout, model=a.model)
    if p.ok:
        print(p.line())
        return 0
    tail = "\n".join(p.log.splitlines()[-15:])
    print(f"{tail}\n{Path(a.binary).name}: {p.why}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
