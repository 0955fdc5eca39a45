"""A load's progress from the bytes of the model the executor has brought in: the pure
arithmetic (_core/launch/progress.py), the sampler over /proc (_shell/launch/load_progress.py), and
`launch` showing it on a real llama-server loading a generated multi-GiB sparse model."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exedra_engine._core.launch.progress import (
    LoadProgress,
    bar,
    fraction,
    mapped_bytes,
    new_step,
    progress_line,
    read_bytes,
    step,
)
from exedra_engine._shell.launch.load_progress import Sampler, child_running

GIB = 1 << 30


def test_fraction_is_clamped_and_zero_while_the_total_is_unknown() -> None:
    assert fraction(0, 0) == 0.0 and fraction(5, -1) == 0.0
    assert fraction(GIB, 4 * GIB) == 0.25
    assert fraction(5 * GIB, 4 * GIB) == 1.0  # a little more mapped than planned


def test_steps_are_whole_tens_reached() -> None:
    assert [step(p) for p in (0, 9, 10, 19, 99, 100, 140)] == [0, 0, 10, 10, 90, 100, 100]


def test_a_line_is_due_at_each_new_step_only() -> None:
    def at(done: int) -> LoadProgress:
        return LoadProgress(done=done, total=100, elapsed=1.0)

    assert new_step(None, at(0)) == 0
    assert new_step(0, at(9)) is None
    assert new_step(0, at(25)) == 20  # a jump over a step prints the one reached
    assert new_step(20, at(29)) is None
    assert new_step(90, at(100)) == 100
    assert new_step(None, LoadProgress(done=5, total=0, elapsed=1.0)) is None


def test_progress_line_and_bar() -> None:
    p = LoadProgress(done=2 * GIB, total=5 * GIB, elapsed=12.4, measure="mapped")
    assert progress_line(p) == " 40 % of 5.0 GiB (2.0 GiB mapped), 12 s"
    assert bar(p, width=10) == "[####......]   40 % of 5.0 GiB (2.0 GiB mapped), 12 s"
    assert progress_line(LoadProgress(done=0, total=0, elapsed=3.0)) == "3 s, size unknown"


SMAPS = """\
55d0c0000000-55d0c0100000 r-xp 00000000 fd:00 123  /usr/bin/llama-server
Rss:                 512 kB
7f0000000000-7f0040000000 r--p 00000000 fd:00 456  /models/a.gguf
Size:            1048576 kB
Rss:              262144 kB
7f0040000000-7f0040001000 rw-p 00000000 00:00 0
Rss:                   4 kB
7f0050000000-7f0060000000 r--p 40000000 fd:00 456  /models/a.gguf
Rss:                1024 kB
"""


def test_mapped_bytes_sum_the_resident_pages_of_the_plans_files_only() -> None:
    assert mapped_bytes(SMAPS, frozenset({"/models/a.gguf"})) == (262144 + 1024) * 1024
    assert mapped_bytes(SMAPS, frozenset({"/models/b.gguf"})) == 0
    assert mapped_bytes("", frozenset({"/models/a.gguf"})) == 0


def test_read_bytes_is_rchar() -> None:
    assert read_bytes("rchar: 123456\nwchar: 9\nread_bytes: 4096\n") == 123456
    assert read_bytes("") == 0


def test_the_sampler_takes_the_larger_of_mapped_and_read_since_it_began() -> None:
    texts = {"/proc/9/smaps": SMAPS, "/proc/9/io": "rchar: 1000\n"}
    s = Sampler(9, {"/models/a.gguf"}, 2 * GIB, read=texts.get)
    first = s.sample(0.5)
    assert first.measure == "mapped" and first.done == (262144 + 1024) * 1024
    texts["/proc/9/smaps"] = ""  # read, not mapped (--no-mmap)
    texts["/proc/9/io"] = f"rchar: {1000 + GIB}\n"
    second = s.sample(1.0)
    assert second.measure == "read" and second.done == GIB and second.fraction == 0.5
    gone = Sampler(10, {"/models/a.gguf"}, GIB, read=lambda _: None).sample(1.0)
    assert gone.done == 0 and gone.fraction == 0.0


@pytest.mark.serial
def test_child_running_finds_the_child_by_its_binary() -> None:
    sleep = "/bin/sleep" if os.path.exists("/bin/sleep") else "/usr/bin/sleep"
    p = subprocess.Popen([sleep, "30"])
    try:
        assert child_running(sleep) == p.pid
        assert child_running("/no/such/binary") == 0
    finally:
        p.kill()
        p.wait()


@pytest.mark.slow
def test_launch_shows_the_load_of_a_sparse_multi_gib_model(
    llama_server: str, tmp_path: Path
) -> None:
    # 2 GiB of holes: llama-server maps and populates it like a real model of that size, and
    # the resident pages of the mapping climb while it does (page cache, no disk read).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from write_sparse_model import write_sparse_llama

    model = write_sparse_llama(str(tmp_path / "sparse.gguf"), 2.0)
    assert model.stat().st_size > 2 * GIB - (1 << 24)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "exedra_engine", "launch", "--model", str(model), "--kind",
            "llama", "--no-config", "--executor", llama_server, "--quiet"]  # fmt: skip
    # Planned first, as a user does: the plan's short load of the model (the build's weight
    # copies, cached) is then not part of the launch, and the pages it populated are dropped
    # so that the launch loads the model cold again.
    subprocess.run([*argv[:3], "plan", *argv[4:-1]], env=env, check=True, capture_output=True)
    fd = os.open(model, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    start = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout is not None
        ready = p.stdout.readline()
        took = time.monotonic() - start
        assert ready.startswith(f"ready     {model} at http://"), ready
    finally:
        p.terminate()
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    loading = [ln for ln in err.splitlines() if ln.startswith("loading   ")]
    # Shown only past 2 s: a fast load (a warm page cache) may show none; a slow one shows the
    # bytes rising in 10 % steps, never falling, each of the plan's 2 GiB.
    percents = [int(ln.split("%")[0].split()[-1]) for ln in loading if " % of 2.0 GiB (" in ln]
    assert percents == sorted(percents) and len(set(percents)) == len(percents), loading
    assert all(" mapped), " in ln for ln in loading if " % of " in ln), loading
    if took > 4.0:  # well past the 2 s after which a load is shown (and the CLI's start-up)
        assert percents, (took, err)


def test_the_feed_passes_each_sample_on_and_follows_a_new_pid() -> None:
    from exedra_engine import Kind, ModelSpec
    from exedra_engine._core.plan.launch_plan import LaunchPlan
    from exedra_engine._core.values import ModelFile
    from exedra_engine._shell.launch.load_progress import ProgressFeed

    plan = LaunchPlan(
        spec=ModelSpec(path="/models/a.gguf", kind=Kind.LLAMA), command="/x",
        args=("--model", "/models/a.gguf"),
        host="h", port=1, ready="/health", files=(ModelFile(path="/models/a.gguf", size=GIB),),
    )  # fmt: skip
    texts = {"/proc/9/smaps": SMAPS, "/proc/11/smaps": ""}
    seen: list[LoadProgress] = []
    feed = ProgressFeed(plan, seen.append, read=texts.get)
    assert feed.tick(9, 1.0).done == (262144 + 1024) * 1024
    assert feed.tick(11, 2.0).done == 0  # another process: sampled afresh
    assert [p.elapsed for p in seen] == [1.0, 2.0] and seen[0].total == GIB


@pytest.mark.slow
def test_an_embedder_gets_the_load_as_events(real_hw, tmp_path: Path) -> None:
    # `on_progress` (LaunchOptions) is fed at each poll of the readiness wait, in every
    # adapter; here the blocking one, on a 1 GiB sparse model.
    import exedra_engine as engine

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    from write_sparse_model import write_sparse_llama

    model = write_sparse_llama(str(tmp_path / "sparse.gguf"), 1.0)
    spec = engine.ModelSpec(id="sparse", path=str(model), kind=engine.Kind.LLAMA)
    plan = engine.plan(spec, real_hw, engine.Constraints(ctx=256, threads=1)).unwrap()
    seen: list[LoadProgress] = []
    with engine.run(plan, on_progress=seen.append) as inst:
        assert inst.endpoint.url
    assert seen, "no event before ready"
    assert all(p.total == model.stat().st_size for p in seen)
    done = [p.done for p in seen]
    assert done == sorted(done) and done[-1] > 0, done
    assert [p.elapsed for p in seen] == sorted(p.elapsed for p in seen)
