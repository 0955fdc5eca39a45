"""The bench package (issue 20 item 7): its rows, its goal table, and the lookups it shares
with the test fixtures through exedra_engine.testing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from exedra_engine.testing import find_executor, find_real_model, free_port, real_model_path

ROOT = Path(__file__).resolve().parents[2]


def _executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_find_executor_prefers_the_bin_dir_then_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, on_path = tmp_path / "bin", tmp_path / "path"
    bin_dir.mkdir()
    on_path.mkdir()
    in_bin = _executable(bin_dir / "llama-server")
    in_path = _executable(on_path / "llama-server")
    _executable(on_path / "whisper-server")
    monkeypatch.setenv("EXEDRA_EXECUTORS_BIN", str(bin_dir))
    monkeypatch.setenv("PATH", str(on_path))
    assert find_executor("llama-server") == in_bin
    assert find_executor("whisper-server") == on_path / "whisper-server"
    monkeypatch.delenv("EXEDRA_EXECUTORS_BIN")
    assert find_executor("llama-server") == in_path
    assert find_executor("llama-fit-params") is None


def test_find_real_model_from_env_or_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EXEDRA_TEST_MODEL", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cached = tmp_path / "exedra-engine" / "models" / "gemma-3-270m-q4_k_m.gguf"
    assert real_model_path() == cached
    assert find_real_model() is None
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"GGUF")
    assert find_real_model() == cached
    named = tmp_path / "other.gguf"
    monkeypatch.setenv("EXEDRA_TEST_MODEL", str(named))
    assert find_real_model() is None
    named.write_bytes(b"GGUF")
    assert find_real_model() == named


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def _bench_imports() -> None:
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))


def test_every_row_and_goal_accounted_for() -> None:
    _bench_imports()
    from bench.goals import GOALS
    from bench.rows import ROWS

    assert list(ROWS) == list(range(1, 13))
    assert {g.row for g in GOALS.values()} == set(ROWS)
    sources = "".join(p.read_text() for p in (ROOT / "bench" / "rows").glob("*.py"))
    unused = [k for k in GOALS if f'"{k}"' not in sources]
    assert not unused, f"goals no row scores: {unused}"


def test_memory_verdict_follows_the_goal_table() -> None:
    """Row 10 is met when every cell is within the table's tolerance (10 %, or 32 MiB for a
    model under 300 MiB), and says how many cells missed it."""
    _bench_imports()
    from bench.goals import MEM_SMALL_SLACK, MiB
    from bench.rows.memory import MemCell, _memory_rows

    def cell(size: int, peak: int, resident: int) -> MemCell:
        c = MemCell("m", size, 512)
        c.peak, c.fit, c.server, c.ollama = peak, peak, peak, peak
        c.est_resident, c.est_reserved = resident, peak
        return c

    small_close = cell(100 * MiB, 200 * MiB, 200 * MiB + MEM_SMALL_SLACK)
    big_close = cell(1000 * MiB, 2000 * MiB, 2150 * MiB)
    resident, reserved, _ = _memory_rows([small_close, big_close])
    assert resident.met and reserved.met and "0 missed" in resident.figure
    big_off = cell(1000 * MiB, 2000 * MiB, 2250 * MiB)
    resident, reserved, _ = _memory_rows([small_close, big_off])
    assert not resident.met and reserved.met and "1 missed" in resident.figure
    assert resident.goal == "each within 10% or 32 MiB" and resident.n == 10
    assert not _memory_rows([])[0].met


def test_run_py_measures_one_row_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--row", "7", "--json", str(out)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(out.read_text())
    assert row["row"] == 7 and row["goal"] == "<=2 ms" and row["ours_s"] > 0
    assert row["met"] == (row["ours_s"] <= 2e-3)
    assert "probe, fixture tree with 4 GPUs" in r.stdout
    bad = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--row", "13"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert bad.returncode == 2 and "no such row: [13]" in bad.stderr
