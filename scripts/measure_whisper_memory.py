"""Measure whisper-server's resident peak (VmHWM) on whisper models of several real shapes.

Writes random-weight ggml models with the hyper-parameters of whisper.cpp's tiny, base and
small models (the weights' values change nothing a server allocates), starts the real
whisper-server on each with one thread, transcribes a one-second tone, and prints the model
file size, VmHWM and their difference: the figures the group planner's whisper estimate is
fitted to (docs/explanation.md, "Memory of whisper-server").

    python scripts/measure_whisper_memory.py /path/to/whisper-server [THREADS]
"""

from __future__ import annotations

import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from exedra_engine import testing
from exedra_engine.testing.whisper import WHISPER_VOCAB, _whisper_tensors

SHAPES = {  # name: (n_state, n_head, n_layer), whisper.cpp's models (src/whisper.cpp)
    "tiny": (384, 6, 4),
    "base": (512, 8, 6),
    "small": (768, 12, 12),
}


def write_model(path: Path, n_state: int, n_head: int, n_layer: int) -> None:
    rng = np.random.default_rng(7)
    n_mels, n_audio_ctx, n_text_ctx = 80, 1500, 448
    with open(path, "wb") as fh:
        fh.write(struct.pack("<I", 0x67676D6C))
        fh.write(
            struct.pack(
                "<11i",
                WHISPER_VOCAB,
                n_audio_ctx,
                n_state,
                n_head,
                n_layer,
                n_text_ctx,
                n_state,
                n_head,
                n_layer,
                n_mels,
                1,
            )
        )
        fh.write(struct.pack("<ii", n_mels, 201))
        fh.write(np.abs(rng.standard_normal(n_mels * 201) * 0.01).astype("<f4").tobytes())
        words = [" ", " -", " '"] + [f" w{i}" for i in range(3, WHISPER_VOCAB)]
        fh.write(struct.pack("<i", len(words)))
        for w in words:
            b = w.encode()
            fh.write(struct.pack("<I", len(b)) + b)
        tensors = _whisper_tensors(n_state, n_mels, n_audio_ctx, n_text_ctx)
        head = [t for t in tensors if ".blocks." not in t[0]]
        blocks = [t for t in tensors if ".blocks." in t[0]]
        order = head[:7]  # encoder head tensors, then its blocks, then the decoder's
        for side in ("encoder", "decoder"):
            if side == "decoder":
                order += head[7:]
            for i in range(n_layer):
                order += [
                    (n.replace(".blocks.0.", f".blocks.{i}."), ne, t)
                    for n, ne, t in blocks
                    if n.startswith(side)
                ]
        for name, ne, t in order:
            n = int(np.prod(ne))
            raw = (rng.standard_normal(n) * 0.1).astype("<f2" if t == "f16" else "<f4").tobytes()
            enc = name.encode()
            fh.write(struct.pack("<iii", len(ne), len(enc), 1 if t == "f16" else 0))
            fh.write(struct.pack(f"<{len(ne)}i", *ne))
            fh.write(enc + raw)


def hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(server: str, model: Path, wav: Path, threads: int = 1) -> tuple[int, int]:
    port = testing.free_port()
    p = subprocess.Popen(
        [server, "--model", str(model), "--port", str(port), "--threads", str(threads)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/", timeout=1).read()
                break
            except OSError:
                time.sleep(0.2)
        loaded = hwm(p.pid)
        boundary = "xx"
        body = (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"'
                "\r\nContent-Type: audio/wav\r\n\r\n"
            ).encode()
            + wav.read_bytes()
            + f"\r\n--{boundary}--\r\n".encode()
        )
        req = urllib.request.Request(
            url + "/inference",
            data=body,
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
        urllib.request.urlopen(req, timeout=600).read()
        return loaded, hwm(p.pid)
    finally:
        p.terminate()
        p.wait(10)


def main() -> None:
    server = sys.argv[1]
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    with tempfile.TemporaryDirectory() as d:
        wav = testing.write_wav(Path(d) / "a.wav", seconds=1.0)
        print("shape  file_bytes  hwm_loaded  hwm_after_request  overhead")
        for name, shape in SHAPES.items():
            model = Path(d) / f"ggml-{name}.bin"
            write_model(model, *shape)
            size = model.stat().st_size
            loaded, peak = measure(server, model, wav, threads)
            print(f"{name:6} {size:11d} {loaded:11d} {peak:18d} {peak - size:9d}", flush=True)
            model.unlink()


if __name__ == "__main__":
    main()
