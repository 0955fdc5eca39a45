"""What every row shares: the Row value, statistics and units, the fake executor, the
fixture hosts, and (from exedra_engine.testing, as the tests have them) the real executors,
the real model and a free port."""

from __future__ import annotations

import socket
import statistics
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.goals import GOALS
from exedra_engine.testing import find_executor, find_real_model, free_port

ROOT = Path(__file__).resolve().parent.parent
FAKE = ROOT / "tests" / "fake_executor.py"
HOSTS = ROOT / "tests" / "fixtures" / "hosts"

__all__ = [
    "FAKE",
    "HOSTS",
    "ROOT",
    "Row",
    "executor",
    "fake_hw",
    "fake_plan",
    "free_port",
    "med",
    "ms",
    "pct",
    "poll_fixed",
    "raw_health",
    "real_model",
    "scored",
    "timed",
    "us",
]


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


def not_measurable(n: int, what: str, why: str, goal: str) -> Row:
    """The row of a figure that could not be taken here, saying why (also in its JSON)."""
    return Row(
        n=n,
        what=what,
        ours="not measurable",
        ref=why,
        figure="-",
        goal=goal,
        met=False,
        data={"reason": why},
    )


def med(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def pct(xs: Sequence[float], q: float) -> float:
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


def executor(name: str) -> Path | None:
    """The installed executor, or None: a row without it says so instead of failing."""
    return find_executor(name)


def real_model() -> Path | None:
    return find_real_model()


def fake_hw() -> Any:
    from exedra_engine import CPU, ExecutorInfo, Hardware, Kind

    return Hardware(cpu=CPU(threads=2), executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(FAKE)),))


def fake_plan(port_base: int) -> Any:
    from exedra_engine import Constraints, Kind, ModelSpec, plan

    return plan(
        ModelSpec(id="f", path="/nonexistent.gguf", kind=Kind.LLAMA),
        fake_hw(),
        Constraints(port_base=port_base),
    ).unwrap()


def poll_fixed(url: str, interval: float, deadline: float) -> float:
    """The reference poller: GET URL every INTERVAL until it answers 200."""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return time.monotonic()
        except OSError:
            pass
        time.sleep(interval)
    raise TimeoutError(url)


def raw_health(port: int) -> bool:
    """GET /health over a bare socket: the cheapest poll there is."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def scored(
    key: str,
    *,
    what: str,
    ours: str,
    ref: str,
    figure: str,
    data: Mapping[str, Any],
    figures: Mapping[str, Any] | None = None,
) -> Row:
    """The row of goal KEY (bench.goals): its number and goal column from the table, and
    whether it was met read from DATA (what --json records) and any further FIGURES."""
    goal = GOALS[key]
    return Row(
        n=goal.row,
        what=what,
        ours=ours,
        ref=ref,
        figure=figure,
        goal=goal.text,
        met=goal.met({**data, **(figures or {})}),
        data=data,
    )
