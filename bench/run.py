#!/usr/bin/env python3
"""Benchmarks, each measured side by side with its reference in this one run.

    python bench/run.py [--json [FILE]] [--quick] [--only N[,N...]]

--json alone writes .cache/bench/<commit>.json, to compare commits.

These machines are shared and noisy: every figure is a median (or a percentile) of
several runs, reported as a ratio to a reference measured in the same process run, and
compared with the goal of issue #6 (rows 2, 6 and 9: issue #11's tighter ones). Nothing
here is a pass/fail test; the closing column says whether the goal was met on this run.
Commands timed in a subprocess (rows 6 and 9) run this tree's package with bytecode cached.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))  # this tree's package, whatever the venv installed
FAKE = ROOT / "tests" / "fake_executor.py"
HOSTS = ROOT / "tests" / "fixtures" / "hosts"


@dataclass(frozen=True, kw_only=True)
class Row:
    """One printed line: what was measured, against what, and whether the goal was met."""

    n: int
    what: str
    ours: str
    ref: str
    figure: str
    goal: str
    met: bool
    data: Mapping[str, Any] = field(default_factory=dict)


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def ms(x: float) -> str:
    return f"{x * 1e3:.2f} ms"


def us(x: float) -> str:
    return f"{x * 1e6:.1f} µs"


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


# 1 ---------------------------------------------------------------------------------------
def bench_inspect(tmp: Path, quick: bool) -> list[Row]:
    import gguf

    from exedra_engine import inspect
    from exedra_engine.testing import write_header_model

    rows = []
    big = write_header_model(tmp / "h152k.gguf", vocab=151_936, file_type_after_vocab=True)
    ours = timed(lambda: inspect(big).unwrap(), 15)
    tracemalloc.start()
    inspect(big).unwrap()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    ref = timed(lambda: gguf.GGUFReader(str(big)), 1 if quick else 3)
    tracemalloc.start()
    gguf.GGUFReader(str(big))
    _, ref_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    ratio = med(ref) / med(ours)
    rows.append(
        Row(
            n=1,
            what=f"inspect, 152k vocab, file_type after it ({big.stat().st_size >> 20} MB)",
            ours=f"{ms(med(ours))}, peak {peak / 2**20:.1f} MB",
            ref=f"GGUFReader {med(ref):.2f} s, peak {ref_peak / 2**20:.0f} MB",
            figure=f"{ratio:.0f}x faster",
            goal=">=300x, <=16 MB",
            met=ratio >= 300 and peak <= 16 << 20,
            data={
                "ours_s": med(ours),
                "ref_s": med(ref),
                "ratio": ratio,
                "peak_bytes": peak,
                "ref_peak_bytes": ref_peak,
            },
        )
    )
    m32 = write_header_model(
        tmp / "h32k.gguf", vocab=32_000, merges=0, architecture="llama", file_type_after_vocab=True
    )
    ours32 = timed(lambda: inspect(m32).unwrap(), 30)
    ref32 = timed(lambda: gguf.GGUFReader(str(m32)), 3)
    r32 = med(ref32) / med(ours32)
    rows.append(
        Row(
            n=1,
            what="inspect, 32k vocab, no merges, file_type after it",
            ours=ms(med(ours32)),
            ref=f"GGUFReader {ms(med(ref32))}",
            figure=f"{r32:.0f}x faster",
            goal="(reported)",
            met=True,
            data={"ours_s": med(ours32), "ref_s": med(ref32), "ratio": r32},
        )
    )
    early = write_header_model(tmp / "early.gguf", vocab=151_936, file_type_after_vocab=False)
    oe = timed(lambda: inspect(early).unwrap(), 200)
    rows.append(
        Row(
            n=1,
            what="inspect, 152k vocab, every field before it",
            ours=us(med(oe)),
            ref="-",
            figure=us(med(oe)),
            goal="well under 1 ms",
            met=med(oe) < 1e-3,
            data={"ours_s": med(oe)},
        )
    )
    return rows


# 2 ---------------------------------------------------------------------------------------
def bench_plan() -> list[Row]:
    from exedra_engine import (
        CPU,
        Config,
        Constraints,
        ExecutorInfo,
        Hardware,
        Kind,
        ModelSpec,
        Override,
        explain_launch,
        plan_launch,
    )

    spec = ModelSpec(
        id="qwen",
        path="/m/qwen.gguf",
        kind=Kind.LLAMA,
        capabilities=("llm",),
        run_args=(
            "--temp",
            "0.7",
            "--top-k",
            "40",
            "--top-p",
            "0.9",
            "--min-p",
            "0.05",
            "--repeat-penalty",
            "1.1",
            "--ctx-size",
            "8192",
        ),
    )
    cfg = Config(
        env={"OMP_NUM_THREADS": "8", "GGML_VK_VISIBLE_DEVICES": "0"},
        engines={
            Kind.LLAMA: Override(
                args=(
                    "--flash-attn",
                    "on",
                    "--batch-size",
                    "1024",
                    "--ubatch-size",
                    "512",
                    "--cache-type-k",
                    "q8_0",
                ),
                env={"LLAMA_ARG_MLOCK": "0"},
            )
        },
        models={"qwen": Override(args=("--ctx-size", "16384", "--parallel", "2", "--jinja"))},
    )
    con = Constraints(
        api_key="secret",
        ctx=4096,
        threads=8,
        overrides=cfg,
        extra_args=("--seed", "42", "--metrics"),
        extra_env=("TZ=UTC",),
    )
    hw = Hardware(
        cpu=CPU(threads=8, ram=1 << 35),
        executors=(
            ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server", backends=("cpu", "vulkan")),
        ),
    )
    p = plan_launch(spec, hw, con).unwrap()
    layers = [
        dict(zip(a[::2], a[1::2], strict=False))
        for a in (
            spec.run_args,
            p.args[:14],
            cfg.engines[Kind.LLAMA].args,
            cfg.models["qwen"].args,
            con.extra_args,
        )
    ]

    def bare() -> dict[str, str]:
        out: dict[str, str] = {}
        for layer in layers:
            out.update(layer)
        env = {**cfg.env, **cfg.engines[Kind.LLAMA].env, "TZ": "UTC"}
        return {**out, **env}

    assert explain_launch(spec, hw, con).unwrap().plan == p
    n = 2000
    ours: list[float] = []
    explained: list[float] = []
    for _ in range(9):  # interleaved, so drift on a shared machine hits both alike
        ours.append(timeit.timeit(lambda: plan_launch(spec, hw, con), number=n) / n)
        explained.append(timeit.timeit(lambda: explain_launch(spec, hw, con), number=n) / n)
    ref = [t / (n * 10) for t in timeit.repeat(bare, number=n * 10, repeat=7)]
    ratio = med(ours) / med(ref)
    goal = 25e-6
    explain_ratio = med(explained) / med(ours)
    return [
        Row(
            n=2,
            what=f"pure planning, 5 layers, {len(p.args)} argv tokens",
            ours=us(med(ours)),
            ref=f"goal {us(goal)}; bare dict merge {us(med(ref))}",
            figure=f"{med(ours) / goal:.2f}x the goal, {ratio:.0f}x the merge",
            goal="<=25 µs (<=1x), <=5x merge",
            met=med(ours) <= goal and ratio <= 5,
            data={
                "ours_s": med(ours),
                "goal_s": goal,
                "goal_ratio": med(ours) / goal,
                "ref_s": med(ref),
                "ratio": ratio,
                "argv_tokens": len(p.args),
            },
        ),
        Row(
            n=2,
            what="explain_launch vs plan_launch, same case",
            ours=us(med(explained)),
            ref=f"plan_launch {us(med(ours))}",
            figure=f"{explain_ratio:.2f}x a plain plan",
            goal="<=1.5x",
            met=explain_ratio <= 1.5,
            data={"ours_s": med(explained), "ref_s": med(ours), "ratio": explain_ratio},
        ),
    ]


# 3 and 5 ---------------------------------------------------------------------------------
def _fake_hw() -> Any:
    from exedra_engine import CPU, ExecutorInfo, Hardware, Kind

    return Hardware(cpu=CPU(threads=2), executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(FAKE)),))


def _fake_plan(port_base: int) -> Any:
    from exedra_engine import Constraints, Kind, ModelSpec, plan

    return plan(
        ModelSpec(id="f", path="/nonexistent.gguf", kind=Kind.LLAMA),
        _fake_hw(),
        Constraints(port_base=port_base),
    ).unwrap()


def _poll_fixed(url: str, interval: float, deadline: float) -> float:
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return time.monotonic()
        except OSError:
            pass
        time.sleep(interval)
    raise TimeoutError(url)


def bench_readiness(tmp: Path, quick: bool) -> list[Row]:
    import trio

    from exedra_engine import open_instance

    n = 8 if quick else 25
    ours: list[float] = []
    rf = tmp / "ready"

    async def one(i: int) -> None:
        env = {"FAKE_READY_AFTER": str(0.15 + 0.037 * (i % 7)), "FAKE_READY_FILE": str(rf)}
        os.environ.update(env)
        async with open_instance(_fake_plan(25000)) as inst:
            t = time.monotonic()
            ours.append(t - float(rf.read_text()))
            del inst

    for i in range(n):
        trio.run(one, i)
    refs: dict[str, list[float]] = {}
    for label, interval in (("250 ms", 0.25), ("1 s", 1.0)):
        lat = []
        for i in range(max(4, n // 3)):
            os.environ["FAKE_READY_AFTER"] = str(0.15 + 0.037 * (i % 7))
            port = _free_port()
            proc = subprocess.Popen(
                [str(FAKE), "--port", str(port)], env=os.environ.copy(), stderr=subprocess.DEVNULL
            )
            try:
                t = _poll_fixed(f"http://127.0.0.1:{port}/health", interval, time.monotonic() + 10)
                lat.append(t - float(rf.read_text()))
            finally:
                proc.terminate()
                proc.wait()
        refs[label] = lat
    for k in ("FAKE_READY_AFTER", "FAKE_READY_FILE"):
        os.environ.pop(k, None)
    p50, p99 = med(ours), pct(ours, 0.99)
    ref_txt = ", ".join(f"{k} poller p50 {ms(med(v))}" for k, v in refs.items())
    return [
        Row(
            n=3,
            what=f"readiness detection, fake executor ({n} launches)",
            ours=f"p50 {ms(p50)}, p99 {ms(p99)}",
            ref=ref_txt,
            figure=f"{med(refs['250 ms']) / p50:.0f}x sooner than 250 ms polling",
            goal="<=5 ms p50, <=20 ms p99",
            met=p50 <= 5e-3 and p99 <= 20e-3,
            data={
                "p50_s": p50,
                "p99_s": p99,
                **{f"ref_{k}_p50_s": med(v) for k, v in refs.items()},
            },
        )
    ]


def _raw_health(port: int) -> bool:
    """GET /health over a bare socket: the cheapest poll there is."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_stop(tmp: Path, quick: bool) -> list[Row]:
    import trio

    from exedra_engine import launch

    n = 8 if quick else 25
    after_exit: list[float] = []
    ef = tmp / "exit"

    async def graceful() -> None:
        os.environ["FAKE_EXIT_FILE"] = str(ef)
        async with trio.open_nursery() as nursery:
            inst = (await launch(nursery, _fake_plan(25100))).unwrap()
            await trio.sleep(0.06)
            await inst.stop()
            after_exit.append(time.monotonic() - float(ef.read_text()))

    for _ in range(n):
        trio.run(graceful)
    os.environ.pop("FAKE_EXIT_FILE", None)
    late: list[float] = []
    timeout = 0.2

    async def stubborn() -> None:
        os.environ["FAKE_MODE"] = "ignore-term"
        async with trio.open_nursery() as nursery:
            inst = (await launch(nursery, _fake_plan(25200))).unwrap()
            await trio.sleep(0.06)
            t = time.monotonic()
            await inst.stop(timeout)
            late.append(time.monotonic() - t - timeout)

    for _ in range(max(4, n // 3)):
        trio.run(stubborn)
    os.environ.pop("FAKE_MODE", None)
    return [
        Row(
            n=5,
            what="stop: process exit to stop() returning",
            ours=f"p50 {ms(med(after_exit))}",
            ref="-",
            figure=ms(med(after_exit)),
            goal="<=5 ms p50",
            met=med(after_exit) <= 5e-3,
            data={"p50_s": med(after_exit)},
        ),
        Row(
            n=5,
            what="stop: SIGTERM ignored, deadline to exit observed",
            ours=f"max {ms(max(late))}",
            ref="-",
            figure=ms(max(late)),
            goal="SIGKILL within 20 ms",
            met=max(late) <= 20e-3,
            data={"max_s": max(late), "p50_s": med(late)},
        ),
    ]


# 4 ---------------------------------------------------------------------------------------
def bench_launch_real(tmp: Path, quick: bool) -> list[Row]:
    import trio

    from exedra_engine import (
        CPU,
        Constraints,
        ExecutorInfo,
        Hardware,
        Kind,
        ModelSpec,
        open_instance,
        plan,
    )
    from exedra_engine.testing import write_tiny_llama

    binary = _executor("llama-server")
    if binary is None:
        return [
            Row(
                n=4,
                what="launch-to-ready, real llama-server",
                ours="not installed",
                ref="-",
                figure="-",
                goal="<=1.1x",
                met=False,
                data={},
            )
        ]
    model = write_tiny_llama(tmp / "tiny.gguf")
    hw = Hardware(cpu=CPU(threads=2), executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(binary)),))
    p = plan(
        ModelSpec(id="t", path=str(model), kind=Kind.LLAMA), hw, Constraints(port_base=25300)
    ).unwrap()
    n = 8 if quick else 25
    ours: list[float] = []

    async def one() -> None:
        t = time.monotonic()
        async with open_instance(p):
            ours.append(time.monotonic() - t)

    ref: list[float] = []

    def direct() -> None:
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
        t = time.monotonic()
        proc = subprocess.Popen(
            [
                str(binary),
                "--model",
                str(model),
                "--port",
                str(port),
                "--no-webui",
                "--n-gpu-layers",
                "0",
            ],
            env=env,
            stderr=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        try:
            while not _raw_health(port):
                pass  # a tight loop, as the reference asks
            ref.append(time.monotonic() - t)
        finally:
            time.sleep(0.06)
            proc.terminate()
            proc.wait()

    for _ in range(n):  # interleaved, so drift hits both alike
        trio.run(one)
        direct()
    ratio = med(ours) / med(ref)
    return [
        Row(
            n=4,
            what="launch-to-ready, real llama-server, tiny model",
            ours=ms(med(ours)),
            ref=f"binary + tight /health loop {ms(med(ref))}",
            figure=f"{ratio:.2f}x",
            goal="<=1.1x",
            met=ratio <= 1.1,
            data={"ours_s": med(ours), "ref_s": med(ref), "ratio": ratio},
        )
    ]


def _executor(name: str) -> Path | None:
    """The installed executor: ./dev puts scripts/install-executors.sh's bin dir on PATH."""
    d = os.environ.get("EXEDRA_EXECUTORS_BIN")
    found = str(Path(d) / name) if d and os.access(Path(d) / name, os.X_OK) else shutil.which(name)
    return Path(found) if found else None


def _real_model() -> Path | None:
    env = os.environ.get("EXEDRA_TEST_MODEL")
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    p = Path(env) if env else cache / "exedra-engine" / "models" / "gemma-3-270m-q4_k_m.gguf"
    return p if p.is_file() else None


def _connections(port: int) -> int:
    """Distinct client ports seen on PORT in /proc/net/tcp{,6}: every connection made to it in
    the last 60 s, since a closed one stays listed in TIME_WAIT that long (on one end or the
    other). Counted on a port that had no entries before the launch."""
    peers: set[int] = set()
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(f).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, remote, state = line.split()[1:4]
            lp, rp = int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16)
            if state == "0A":  # LISTEN
                continue
            if lp == port:
                peers.add(rp)
            elif rp == port:
                peers.add(lp)
    return len(peers)


def _inventory_row(model: Path, inspect_s: float) -> Row:
    """Issue 19 item 1: the tensor inventory (every key/value and tensor info, the
    vocabulary walked) against today's inspect (which may stop before the vocabulary)."""
    from exedra_engine._shell.inspect import read_inventory

    inv = timed(lambda: read_inventory(model).unwrap(), 15)
    ratio = med(inv) / inspect_s
    n = len(read_inventory(model).unwrap().tensors)
    return Row(
        n=8,
        what=f"inventory, real model ({n} tensors)",
        ours=ms(med(inv)),
        ref=f"inspect {ms(inspect_s)}",
        figure=f"{ratio:.1f}x inspect",
        goal="<= 2x inspect",
        met=ratio <= 2,
        data={"inventory_s": med(inv), "inspect_s": inspect_s, "tensors": n},
    )


def bench_real_model(tmp: Path, quick: bool) -> list[Row]:
    """Gemma 3 270M Q4_K_M: a real load (seconds), the header of a real 241 MiB file."""
    import gguf
    import trio

    from exedra_engine import (
        CPU,
        Constraints,
        ExecutorInfo,
        Hardware,
        Kind,
        ModelSpec,
        inspect,
        open_instance,
        plan,
    )

    model, binary = _real_model(), _executor("llama-server")
    if model is None or binary is None:
        missing = "the model" if model is None else "llama-server"
        return [
            Row(
                n=8,
                what="real model (Gemma 3 270M)",
                ours=f"{missing} missing",
                ref="-",
                figure="-",
                goal="-",
                met=False,
                data={},
            )
        ]
    rows = []
    # inspect: ours, RamaLama's parser, gguf's reader (slow: once).
    ours = timed(lambda: inspect(model).unwrap(), 15)
    try:
        from ramalama.model_inspect.gguf_parser import GGUFInfoParser

        rama: list[float] | None = timed(
            lambda: GGUFInfoParser.parse_metadata(str(model)), 1 if quick else 3
        )
    except ImportError:
        rama = None
    ref = timed(lambda: gguf.GGUFReader(str(model)), 1)
    txt = f"GGUFReader {med(ref):.1f} s" + (f", RamaLama {med(rama):.2f} s" if rama else "")
    fig = f"{med(ref) / med(ours):.0f}x / " + (
        f"{med(rama) / med(ours):.0f}x faster" if rama else "RamaLama not installed"
    )
    rows.append(
        Row(
            n=8,
            what=f"inspect, real model ({model.stat().st_size >> 20} MB)",
            ours=ms(med(ours)),
            ref=txt,
            figure=fig,
            goal="(reported)",
            met=True,
            data={
                "ours_s": med(ours),
                "gguf_s": med(ref),
                "ramalama_s": med(rama) if rama else None,
            },
        )
    )
    rows.append(_inventory_row(model, med(ours)))
    # launch-to-ready and connections per launch: ours vs the bare binary with a fixed poller.
    hw = Hardware(cpu=CPU(threads=2), executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(binary)),))
    n = 2 if quick else 5
    ours_t: list[float] = []
    ours_c: list[int] = []

    async def one() -> None:
        port = _free_port()
        p = plan(
            ModelSpec(id="g", path=str(model), kind=Kind.LLAMA), hw, Constraints(port=port, ctx=512)
        ).unwrap()
        before = _connections(port)
        t = time.monotonic()
        async with open_instance(p, ready_timeout=120):
            ours_t.append(time.monotonic() - t)
            ours_c.append(_connections(port) - before)

    refs: dict[str, tuple[list[float], list[int]]] = {"250 ms": ([], []), "1 s": ([], [])}

    def bare(interval: float, out: tuple[list[float], list[int]]) -> None:
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
        argv = [str(binary), "-m", str(model), "--port", str(port), "-c", "512", "-ngl", "0"]
        before = _connections(port)
        t = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        try:
            out[0].append(_poll_fixed(f"http://127.0.0.1:{port}/health", interval, t + 120) - t)
            out[1].append(_connections(port) - before)
        finally:
            proc.terminate()
            proc.wait()

    for _ in range(n):  # interleaved, so drift hits all three alike
        trio.run(one)
        bare(0.25, refs["250 ms"])
        bare(1.0, refs["1 s"])
    r250, r1 = (med(refs[k][0]) / med(ours_t) for k in ("250 ms", "1 s"))
    rows.append(
        Row(
            n=8,
            what=f"launch-to-ready, real model ({n} launches each)",
            ours=f"{med(ours_t):.2f} s",
            ref=(
                f"250 ms poller {med(refs['250 ms'][0]):.2f} s, "
                f"1 s poller {med(refs['1 s'][0]):.2f} s"
            ),
            figure=f"{r250:.2f}x / {r1:.2f}x sooner",
            goal="not slower than either",
            met=r250 >= 1 and r1 >= 1,
            data={
                "ours_s": med(ours_t),
                "ref_250ms_s": med(refs["250 ms"][0]),
                "ref_1s_s": med(refs["1 s"][0]),
            },
        )
    )
    rows.append(
        Row(
            n=8,
            what="TCP connections opened per launch, real model",
            ours=f"median {med(ours_c):.0f}, max {max(ours_c)}",
            ref=f"250 ms poller {med(refs['250 ms'][1]):.0f}, 1 s poller {med(refs['1 s'][1]):.0f}",
            figure=f"{med(ours_c):.0f} per launch",
            goal="a handful (<= 5)",
            met=med(ours_c) <= 5,
            data={
                "ours": ours_c,
                "ref_250ms": refs["250 ms"][1],
                "ref_1s": refs["1 s"][1],
            },
        )
    )
    return rows


# 6 and 9 --------------------------------------------------------------------------------
def _cli() -> tuple[list[str], str]:
    """The console script of this interpreter's environment (what a user runs), else
    ``python -m exedra_engine``; `_child_env` makes either import this tree."""
    exe = Path(sys.executable).parent / "exedra-engine"
    if exe.exists():
        return [str(exe)], "exedra-engine"
    return [sys.executable, "-m", "exedra_engine"], "python -m exedra_engine"


def _child_env(tmp: Path) -> dict[str, str]:
    """The environment of every command timed in rows 6 and 9: this tree first on the path,
    and bytecode cached (in a private prefix, warmed by one untimed run of each command), as
    an installed package has it. PYTHONDONTWRITEBYTECODE would recompile every module of
    ours on every run: 5 ms for the flag data alone."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE",)}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    return env


def _interleaved(
    cmds: dict[str, list[str]], n: int, env: dict[str, str]
) -> dict[str, list[float]] | str:
    """Wall times of each command, `n` rounds with the order alternating between rounds,
    after one untimed warm-up run of each; or the reason one of them fails."""
    for name, cmd in cmds.items():
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            last = (r.stderr.strip().splitlines() or ["no message"])[-1]
            return f"{name} exits {r.returncode}: {last[:120]}"
    out: dict[str, list[float]] = {name: [] for name in cmds}
    order = list(cmds)
    for i in range(n):
        for name in order if i % 2 == 0 else order[::-1]:
            t = time.perf_counter()
            subprocess.run(cmds[name], env=env, stdout=subprocess.DEVNULL, check=True)
            out[name].append(time.perf_counter() - t)
    return out


def _cpu_times(cmds: dict[str, list[str]], n: int, env: dict[str, str]) -> dict[str, list[float]]:
    """User + system CPU seconds of each command (from wait4), `n` alternating rounds: on a
    shared machine the processor time a start-up costs is far steadier than its wall time,
    which includes every wait for a core another process holds."""
    out: dict[str, list[float]] = {name: [] for name in cmds}
    order = list(cmds)
    for i in range(n):
        for name in order if i % 2 == 0 else order[::-1]:
            p = subprocess.Popen(cmds[name], env=env, stdout=subprocess.DEVNULL)
            _, _, usage = os.wait4(p.pid, 0)
            out[name].append(usage.ru_utime + usage.ru_stime)
    return out


_HEAVY = ("trio", "numpy", "gguf", "yaml", "returns")


def _imported(cmd: list[str], env: dict[str, str]) -> list[str]:
    """Which of `_HEAVY` the command imports (read from its -X importtime report)."""
    r = subprocess.run(
        cmd,
        env={**env, "PYTHONPROFILEIMPORTTIME": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    names = {line.rsplit("|", 1)[-1].strip() for line in r.stderr.splitlines() if "|" in line}
    return sorted(m for m in _HEAVY if m in names)


def bench_cli(tmp: Path, quick: bool) -> list[Row]:
    cli, label = _cli()
    cmd = [
        *cli,
        "plan",
        "--model",
        str(tmp / "absent.gguf"),
        "--kind",
        "llama",
        # No --config: the default directory, absent on most hosts (the common case); a
        # named path must exist since the command line checks it at parse.
        "--executor",
        "/usr/bin/true",
        "--json",
    ]
    env = _child_env(tmp)
    n = 20 if quick else 40
    times = _interleaved({"ours": cmd, "ref": [sys.executable, "-c", "pass"]}, n, env)
    if isinstance(times, str):
        return [
            Row(
                n=6,
                what="CLI cold start: plan --json",
                ours="not measurable",
                ref=times,
                figure="-",
                goal="-",
                met=False,
                data={},
            )
        ]
    ours, ref = times["ours"], times["ref"]
    heavy = _imported(cmd, env)
    extra = med(ours) - med(ref)
    cpu = _cpu_times({"ours": cmd, "ref": [sys.executable, "-c", "pass"]}, n, env)
    cpu_extra = med(cpu["ours"]) - med(cpu["ref"])
    goal = 60e-3
    return [
        Row(
            n=6,
            what=f"CLI cold start: {label} plan --json, no config",
            ours=f"{ms(med(ours))} (cpu {ms(med(cpu['ours']))})",
            ref=f"python -c pass {ms(med(ref))} (cpu {ms(med(cpu['ref']))}; {n} runs each)",
            figure=f"+{ms(extra)} (cpu +{ms(cpu_extra)}), {extra / goal:.2f}x the goal",
            goal="<=60 ms more; no " + "/".join(_HEAVY),
            met=extra <= goal and not heavy,
            data={
                "ours_s": med(ours),
                "ref_s": med(ref),
                "extra_s": extra,
                "cpu_s": med(cpu["ours"]),
                "cpu_ref_s": med(cpu["ref"]),
                "cpu_extra_s": cpu_extra,
                "goal_s": goal,
                "runs": n,
                "heavy_imports": heavy,
            },
        )
    ]


def bench_vs_ramalama(tmp: Path, quick: bool) -> list[Row]:
    """`exedra-engine plan --json` on the real model (its header read, the port scanned) next
    to RamaLama printing its command for the same model (it reads no header)."""
    what = "plan --json vs ramalama --dryrun serve, real model"
    goal = ">=4x faster"
    model = _real_model()
    rama = Path(sys.executable).parent / "ramalama"
    if not rama.exists():
        found = shutil.which("ramalama")
        rama = Path(found) if found else rama
    if model is None:
        why = "model missing: run scripts/fetch_model.py"
        return [
            Row(
                n=9,
                what=what,
                ours="not measurable",
                ref=why,
                figure="-",
                goal=goal,
                met=False,
                data={"reason": why},
            )
        ]
    if not rama.exists():
        why = "ramalama not installed: pip install -e '.[bench]'"
        return [
            Row(
                n=9,
                what=what,
                ours="not measurable",
                ref=why,
                figure="-",
                goal=goal,
                met=False,
                data={"reason": why},
            )
        ]
    binary = _executor("llama-server")
    cli, label = _cli()
    ours_cmd = [
        *cli,
        "plan",
        "--model",
        str(model),
        "--kind",
        "llama",
        "--executor",
        str(binary) if binary else "/usr/bin/true",
        "--json",
    ]
    ref_cmd = [str(rama), "--dryrun", "--nocontainer", "serve", str(model)]
    env = _child_env(tmp)
    n = 20 if quick else 30
    times = _interleaved({"exedra-engine": ours_cmd, "ramalama": ref_cmd}, n, env)
    if isinstance(times, str):
        return [
            Row(
                n=9,
                what=what,
                ours="not measurable",
                ref=times,
                figure="-",
                goal=goal,
                met=False,
                data={"reason": times},
            )
        ]
    ours, ref = times["exedra-engine"], times["ramalama"]
    ratio = med(ref) / med(ours)
    return [
        Row(
            n=9,
            what=what,
            ours=ms(med(ours)),
            ref=f"ramalama {ms(med(ref))} ({n} runs each)",
            figure=f"{ratio:.2f}x faster",
            goal=goal,
            met=ratio >= 4,
            data={
                "ours_s": med(ours),
                "ref_s": med(ref),
                "ratio": ratio,
                "runs": n,
                "executor": str(binary) if binary else "/usr/bin/true (llama-server not found)",
                "cli": label,
            },
        )
    ]


# 7 ---------------------------------------------------------------------------------------
def bench_probe() -> list[Row]:
    from exedra_engine import probe
    from exedra_engine._shell.host import LocalHost

    h = LocalHost(str(HOSTS / "four-gpus"), path_env="/usr/bin", affinity=8)
    assert len(probe(h).unwrap().gpus) == 4
    t = [x / 50 for x in timeit.repeat(lambda: probe(h), number=50, repeat=9)]
    return [
        Row(
            n=7,
            what="probe, fixture tree with 4 GPUs",
            ours=us(med(t)),
            ref="-",
            figure=us(med(t)),
            goal="<=2 ms",
            met=med(t) <= 2e-3,
            data={"ours_s": med(t)},
        )
    ]


# 10 --------------------------------------------------------------------------------------
MEM_MODELS = ("llama", "qwen2", "gemma3", "qwen3moe")
MEM_CTXS = (512, 2048, 8192, 32768)
MEM_CTXS_QUICK = (512, 8192)
MiB = 1 << 20


class MemCell:
    """One model at one context: what the executor really did and what each figure said."""

    def __init__(self, model: str, size: int, ctx: int) -> None:
        self.model, self.size, self.ctx = model, size, ctx
        self.peak = 0
        """llama-server's VmHWM after a chat request, bytes."""
        self.prompt_tokens = 0
        self.fit = 0
        """llama-fit-params' Host model + context + compute, bytes (what it reserves)."""
        self.server = 0
        """What llama-server itself said it reserved on the host (its breakdown at exit)."""
        self.est_resident: int | None = None
        self.est_reserved: int | None = None
        self.ollama = 0
        self.note = ""


def _ollama_formula(path: Path, ctx: int) -> int:
    """Ollama's published estimate: file size + an f16 KV cache for every layer at ctx."""
    from exedra_engine._shell.inspect import read_inventory

    inv = read_inventory(path).unwrap()
    kv_heads = max(inv.head_count_kv or (1,))
    head_dim = inv.key_length or inv.embedding // max(*(inv.head_count or (1,)), 1)
    return path.stat().st_size + 2 * inv.blocks * kv_heads * head_dim * ctx * 2


def _vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _post_json(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            out: dict[str, Any] = json.loads(r.read())
            return out
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{url}: {e.code} {e.read()[:300]!r}") from None


_BREAKDOWN_ROW = re.compile(
    r"memory_breakdown_print: \|\s+- (Host|CPU_REPACK)\s+\|\s+(\d+) =\s+(\d+) \+\s+(\d+) \+\s+(\d+)"
)


def _server_reserved(log: str) -> int:
    """What llama-server itself says it reserved on the host (the Host and CPU_REPACK rows of
    the memory breakdown it prints at exit, at debug verbosity), bytes; 0 if it did not."""
    rows: dict[str, int] = {}
    for m in _BREAKDOWN_ROW.finditer(log):
        rows[m.group(1)] = int(m.group(2)) * MiB  # the last breakdown (at exit) wins
    return sum(rows.values())


def _peak_after_chat(plan: Any, ctx: int, log_path: Path) -> tuple[int, int, int]:
    """Launch the plan's executor, ask one chat question whose prompt is longer than one
    ubatch where the context allows it (a 512-token context does not), and return its peak
    RSS (VmHWM), the prompt's token count, and what the server said it reserved."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
    env.update(e.split("=", 1) for e in plan.env)  # type: ignore[arg-type]
    with open(log_path, "wb") as log:
        # --verbose: only for the memory breakdown it then prints at exit
        proc = subprocess.Popen(
            [plan.command, *plan.args, "--verbose"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
    try:
        base = f"http://127.0.0.1:{plan.port}"
        _poll_fixed(base + "/health", 0.05, time.monotonic() + 300)
        # 700 tokens is past one 512-token ubatch; a small context takes half its size
        from exedra_engine.testing import _WORDS

        text = " ".join(_WORDS[i % len(_WORDS)] for i in range(1400))
        toks = _post_json(base + "/tokenize", {"content": text}, timeout=60)["tokens"]
        want = min(700, ctx // 2)
        prompt = _post_json(base + "/detokenize", {"tokens": toks[:want]}, timeout=60)["content"]
        r = _post_json(
            base + "/v1/chat/completions",
            {"messages": [{"role": "user", "content": prompt}], "max_tokens": 4},
            timeout=600,
        )
        peak, tokens = _vm_hwm(proc.pid), int(r.get("usage", {}).get("prompt_tokens", 0))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return peak, tokens, _server_reserved(log_path.read_text(errors="replace"))


def _estimate(plan: Any) -> tuple[int | None, int | None]:
    """The plan's resident and reserved host figures (its `memory`, issue 19 item 2), less
    the prompt cache (a budget the one request of this bench does not fill); None for a
    plan without them."""
    mem = getattr(plan, "memory", None)
    if mem is None:
        return None, None
    host = mem.host
    return (
        host.total - host.parts.prompt_cache,
        host.reserved - host.reserved_parts.prompt_cache,
    )


def _err(ours: int | None, truth: int) -> float | None:
    return None if ours is None or not truth else (ours - truth) / truth


def _within(ours: int | None, truth: int, size: int) -> bool:
    """The goal: within 10 %, or 32 MiB for a model under 300 MiB."""
    if ours is None or not truth:
        return False
    slack = max(0.10 * truth, 32 * MiB if size < 300 * MiB else 0)
    return abs(ours - truth) <= slack


def bench_memory(tmp: Path, quick: bool) -> list[Row]:
    """The memory plan against the executor: peak RSS and llama-fit-params, per model and
    context, CPU only; Ollama's formula beside them."""
    from exedra_engine import CPU, Constraints, ExecutorInfo, Hardware, Kind, ModelSpec, plan
    from exedra_engine._shell.measure import measure
    from exedra_engine.testing import write_arch_model

    binary = _executor("llama-server")
    if binary is None:
        return [
            Row(
                n=10,
                what="memory plan vs executor",
                ours="llama-server missing",
                ref="-",
                figure="-",
                goal="-",
                met=False,
                data={},
            )
        ]
    models: list[tuple[str, Path]] = []
    real = _real_model()
    if real is not None:
        models.append(("gemma-3-270m (real)", real))
    for arch in MEM_MODELS:
        models.append((arch, write_arch_model(tmp / f"mem-{arch}.gguf", arch)))
    hw = Hardware(
        cpu=CPU(threads=os.cpu_count() or 1),
        executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(binary), backends=("cpu",)),),
    )
    cells: list[MemCell] = []
    for name, path in models:
        for ctx in MEM_CTXS_QUICK if quick else MEM_CTXS:
            cell = MemCell(name, path.stat().st_size, ctx)
            p = plan(
                ModelSpec(path=str(path), kind=Kind.LLAMA),
                hw,
                Constraints(ctx=ctx, port=_free_port(), no_gpu=True),
            ).unwrap()
            m = measure(p).unwrap()
            cell.fit = m.host.total
            cell.peak, cell.prompt_tokens, cell.server = _peak_after_chat(
                p, ctx, tmp / "mem-server.log"
            )
            cell.est_resident, cell.est_reserved = _estimate(p)
            cell.ollama = _ollama_formula(path, ctx)
            cells.append(cell)
            print(
                f"  memory: {name} ctx {ctx}: peak {cell.peak >> 20} MiB, fit {cell.fit >> 20} MiB",
                file=sys.stderr,
            )
    _print_memory_table(cells)
    return _memory_rows(cells)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.0f}%"


def _mib(x: int | None) -> str:
    return "-" if x is None else f"{x / MiB:.0f}"


def _print_memory_table(cells: list[MemCell]) -> None:
    print(
        "\nmemory (MiB), CPU only: peak = llama-server VmHWM after a chat request; fit = "
        "llama-fit-params Host reserved;\nest / est.r = the plan's resident / reserved estimate "
        "(prompt cache budget left out); srv.r = what llama-server said it reserved (its\n"
        "breakdown at exit: it sizes logits for one output per slot, llama-fit-params for every "
        "ubatch token); ollama = file size + f16 KV, against peak"
    )
    head = (
        f"{'model':<20} {'ctx':>6} {'prompt':>6} {'peak':>6} {'est':>6} {'err':>6} "
        f"{'fit':>6} {'est.r':>6} {'err':>6} {'srv.r':>6} {'fit-srv':>7} "
        f"{'ollama':>6} {'err':>6}"
    )
    print(head)
    for c in cells:
        print(
            f"{c.model:<20} {c.ctx:>6} {c.prompt_tokens:>6} {_mib(c.peak):>6} "
            f"{_mib(c.est_resident):>6} {_pct(_err(c.est_resident, c.peak)):>6} "
            f"{_mib(c.fit):>6} {_mib(c.est_reserved):>6} {_pct(_err(c.est_reserved, c.fit)):>6} "
            f"{_mib(c.server or None):>6} {_pct(_err(c.fit, c.server)):>7} "
            f"{_mib(c.ollama):>6} {_pct(_err(c.ollama, c.peak)):>6}"
        )
    print()


def _worst(
    cells: list[MemCell], ours: Callable[[MemCell], int | None], truth: Callable[[MemCell], int]
) -> tuple[MemCell | None, float | None]:
    scored = [(c, _err(ours(c), truth(c))) for c in cells]
    known = [(c, e) for c, e in scored if e is not None]
    if not known:
        return None, None
    return max(known, key=lambda ce: abs(ce[1]))


def _memory_rows(cells: list[MemCell]) -> list[Row]:
    rows = []
    checks: list[tuple[str, Callable[[MemCell], int | None], Callable[[MemCell], int]]] = [
        ("resident estimate vs peak RSS", lambda c: c.est_resident, lambda c: c.peak),
        ("reserved estimate vs llama-fit-params", lambda c: c.est_reserved, lambda c: c.fit),
    ]
    ollama_worst = _worst(cells, lambda c: c.ollama, lambda c: c.peak)
    ollama_errs = [e for c in cells if (e := _err(c.ollama, c.peak)) is not None]
    ref = (
        f"Ollama {min(ollama_errs) * 100:+.0f}% .. {max(ollama_errs) * 100:+.0f}% vs peak"
        if ollama_errs
        else "-"
    )
    for what, ours, truth in checks:
        worst, err = _worst(cells, ours, truth)
        missed = [c for c in cells if not _within(ours(c), truth(c), c.size)]
        met = bool(cells) and not missed
        fig = (
            f"worst {_pct(err)} ({worst.model} ctx {worst.ctx}), {len(missed)} missed"
            if worst is not None
            else "no estimate (needs issue 19 item 2)"
        )
        rows.append(
            Row(
                n=10,
                what=f"memory: {what}, {len(cells)} cells",
                ours=fig,
                ref=ref,
                figure=fig,
                goal="each within 10% or 32 MiB",
                met=met,
                data={
                    "cells": [vars(c) for c in cells],
                    "worst_err": err,
                    "ollama_worst_err": ollama_worst[1],
                },
            )
        )
    worst, err = _worst(cells, lambda c: c.fit, lambda c: c.server or 0)
    rows.append(
        Row(
            n=10,
            what="memory: llama-fit-params vs llama-server's own reservation",
            ours=f"worst {_pct(err)}" + (f" ({worst.model} ctx {worst.ctx})" if worst else ""),
            ref="llama-server's breakdown at exit",
            figure=f"worst {_pct(err)}",
            goal="(reported)",
            met=True,
            data={"worst_err": err},
        )
    )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--json",
        metavar="FILE",
        nargs="?",
        const="",
        help="also write the rows as JSON (default: .cache/bench/<commit>.json)",
    )
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--only", help="comma-separated row numbers")
    a = ap.parse_args()
    only = {int(x) for x in a.only.split(",")} if a.only else set(range(1, 11))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        steps: list[tuple[int, Callable[[], list[Row]]]] = [
            (1, lambda: bench_inspect(tmp, a.quick)),
            (2, bench_plan),
            (3, lambda: bench_readiness(tmp, a.quick)),
            (4, lambda: bench_launch_real(tmp, a.quick)),
            (5, lambda: bench_stop(tmp, a.quick)),
            (6, lambda: bench_cli(tmp, a.quick)),
            (7, bench_probe),
            (8, lambda: bench_real_model(tmp, a.quick)),
            (9, lambda: bench_vs_ramalama(tmp, a.quick)),
            (10, lambda: bench_memory(tmp, a.quick)),
        ]
        for n, step in steps:
            if n in only:
                rows.extend(step())
    w = max(len(r.what) for r in rows)
    print(
        f"{'#':<2} {'benchmark':<{w}}  {'ours':<28} {'reference':<44} {'figure':<30} "
        f"{'goal':<26} met"
    )
    for r in rows:
        print(
            f"{r.n:<2} {r.what:<{w}}  {r.ours:<28} {r.ref:<44} {r.figure:<30} {r.goal:<26} "
            f"{'OK' if r.met else 'NO'}"
        )
    if a.json is not None:
        if not a.json:
            commit = subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            a.json = str(ROOT / ".cache" / "bench" / f"{commit or 'unknown'}.json")
            Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        print(f"\nwrote {a.json}")
        Path(a.json).write_text(
            json.dumps(
                [
                    {
                        "row": r.n,
                        "what": r.what,
                        "figure": r.figure,
                        "goal": r.goal,
                        "met": r.met,
                        **r.data,
                    }
                    for r in rows
                ],
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
