"""Every path the command line opens is refused unless it is a regular file (a FIFO would
block the open, a device feed it without end), and SIGINT and SIGTERM end any command with
one line and 128+N."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exedra_engine._shell.local.files import open_append, read_regular
from exedra_engine._shell.local.ports import NotRegularFile
from tests.conftest import FAKE, Run

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


def _one_error_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_emit_of_a_plan_that_is_a_fifo_is_refused_at_once(run: Run, fifo: Path) -> None:
    started = time.monotonic()
    r = run("emit", str(fifo), "--target", "k8s")
    assert time.monotonic() - started < 5
    assert r.code == 2
    assert "not a regular file (a FIFO)" in _one_error_line(r.err)


def test_emit_of_a_plan_that_is_a_device_is_refused(run: Run) -> None:
    r = run("emit", "/dev/zero", "--target", "k8s")
    assert r.code == 2 and "not a regular file (a device)" in _one_error_line(r.err)


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_hardware_file_that_is_a_fifo_or_device_is_refused(
    run: Run, tiny_llama: Path, fifo: Path, special: str
) -> None:
    path = str(fifo) if special == "fifo" else special
    r = run("plan", "--model", str(tiny_llama), "--kind", "llama", "--hardware", path)
    assert r.code == 2 and "not a regular file" in _one_error_line(r.err)


def test_launch_log_file_that_is_a_fifo_is_refused_before_anything_starts(
    run: Run, tiny_llama: Path, fifo: Path
) -> None:
    r = run("launch", "--model", str(tiny_llama), "--kind", "llama", "--executor", str(FAKE),
            "--no-config", "--no-port-check", "--log-file", str(fifo))  # fmt: skip
    assert r.code == 2
    assert "not a regular file" in r.err


def test_launch_of_a_model_that_is_a_fifo_says_what_it_is(run: Run, fifo: Path) -> None:
    r = run("launch", "--model", str(fifo), "--kind", "llama", "--executor", str(FAKE))
    assert r.code == 2 and "is not a regular file" in _one_error_line(r.err)


def test_open_append_refuses_a_fifo_with_or_without_a_reader(fifo: Path) -> None:
    with pytest.raises(NotRegularFile):
        open_append(fifo)  # no reader: open(2) would block; O_NONBLOCK fails at once
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(NotRegularFile, match="FIFO"):
            open_append(fifo)
    finally:
        os.close(reader)


def test_open_append_makes_the_log_0600_and_appends(tmp_path: Path) -> None:
    log = tmp_path / "log"
    with open_append(log) as f:
        f.write(b"a\n")
    with open_append(log) as f:
        f.write(b"b\n")
    assert log.read_bytes() == b"a\nb\n"
    assert log.stat().st_mode & 0o777 == 0o600


def test_read_regular_refuses_devices_and_reads_bounded(tmp_path: Path) -> None:
    with pytest.raises(NotRegularFile, match="device"):
        read_regular("/dev/zero", 10)
    with pytest.raises(IsADirectoryError):
        read_regular(tmp_path, 10)
    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert read_regular(f, 10) == b"x" * 11


_BLOCKED = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal
import exedra_engine._shell.local.files as files
from exedra_engine.cli import main
def blocking(path, limit):  # what a plain open() of a FIFO did
    print("blocked", flush=True)
    return os.read(os.open(path, os.O_RDONLY), limit)
files.read_regular = blocking
sys.exit(main(["emit", sys.argv[1], "--target", "k8s"]))
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_end_a_command_blocked_in_an_open(fifo: Path, sig: int) -> None:
    env = {**os.environ, "PYTHONPATH": SRC}
    p = subprocess.Popen(
        [sys.executable, "-c", _BLOCKED, str(fifo)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert p.stdout is not None and p.stdout.readline() == "blocked\n"
        time.sleep(0.2)
        p.send_signal(sig)
        _, err = p.communicate(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + sig, err
    name = signal.Signals(sig).name
    assert _one_error_line(err) == f"exedra-engine: interrupted by {name}"


def test_probe_measure_of_a_model_that_is_a_fifo_says_what_it_is(run: Run, fifo: Path) -> None:
    r = run("probe", "--measure", str(fifo))
    assert r.code == 2 and "not a regular file" in _one_error_line(r.err)
