"""Row 10: the memory plan against the executor (peak RSS, llama-fit-params), Ollama beside."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.common import Row, executor, free_port, poll_fixed, real_model, scored
from bench.goals import MEM_SMALL_MODEL, MEM_SMALL_SLACK, MEM_TOLERANCE, MiB

N = 10


MEM_MODELS = ("llama", "qwen2", "gemma3", "qwen3moe")


MEM_CTXS = (512, 2048, 8192, 32768)


MEM_CTXS_QUICK = (512, 8192)


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


@contextlib.contextmanager
def serving(plan: Any, log_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """The plan's executor started (its log, ``--verbose`` for the memory breakdown it prints
    at exit, in `log_path`) and ready: the process and its base URL; stopped on leaving
    (SIGTERM, then its whole group killed after 30 s), so the breakdown is in the log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_")}
    env.update(e.split("=", 1) for e in plan.env)
    with open(log_path, "wb") as log:
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
        poll_fixed(base + "/health", 0.05, time.monotonic() + 300)
        yield proc, base
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _peak_after_chat(plan: Any, ctx: int, log_path: Path) -> tuple[int, int, int]:
    """Launch the plan's executor, ask one chat question whose prompt is longer than one
    ubatch where the context allows it (a 512-token context does not), and return its peak
    RSS (VmHWM), the prompt's token count, and what the server said it reserved."""
    with serving(plan, log_path) as (proc, base):
        # 700 tokens is past one 512-token ubatch; a small context takes half its size
        from exedra_engine.testing.models import _WORDS

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
    return peak, tokens, _server_reserved(log_path.read_text(errors="replace"))


def _estimate(plan: Any) -> tuple[int | None, int | None]:
    """The plan's resident and reserved host figures (its `memory`, issue 19 item 2), less
    the prompt cache (a budget the one request of this bench does not fill); None for a
    plan without them."""
    mem = getattr(plan, "memory", None)
    if mem is None:
        return None, None
    host = mem.host
    return (host.total - host.parts.prompt_cache, host.reserved - host.reserved_parts.prompt_cache)


def _err(ours: int | None, truth: int) -> float | None:
    return None if ours is None or not truth else (ours - truth) / truth


def _within(ours: int | None, truth: int, size: int) -> bool:
    """The goal (bench.goals): within 10 %, or 32 MiB for a model under 300 MiB."""
    if ours is None or not truth:
        return False
    slack = max(MEM_TOLERANCE * truth, MEM_SMALL_SLACK if size < MEM_SMALL_MODEL else 0)
    return abs(ours - truth) <= slack


def run(tmp: Path, quick: bool) -> list[Row]:
    """The memory plan against the executor: peak RSS and llama-fit-params, per model and
    context, CPU only; Ollama's formula beside them."""
    from exedra_engine import CPU, Constraints, ExecutorInfo, Hardware, Kind, ModelSpec, plan
    from exedra_engine._shell.measure import measure
    from exedra_engine.testing import write_arch_model

    binary = executor("llama-server")
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
    real = real_model()
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
                Constraints(ctx=ctx, port=free_port(), no_gpu=True),
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
        fig = (
            f"worst {_pct(err)} ({worst.model} ctx {worst.ctx}), {len(missed)} missed"
            if worst is not None
            else "no estimate (needs issue 19 item 2)"
        )
        rows.append(
            scored(
                "memory",
                what=f"memory: {what}, {len(cells)} cells",
                ours=fig,
                ref=ref,
                figure=fig,
                data={
                    "cells": [vars(c) for c in cells],
                    "worst_err": err,
                    "ollama_worst_err": ollama_worst[1],
                },
                figures={"missed": len(missed)},
            )
        )
    worst, err = _worst(cells, lambda c: c.fit, lambda c: c.server or 0)
    rows.append(
        scored(
            "fit_vs_server",
            what="memory: llama-fit-params vs llama-server's own reservation",
            ours=f"worst {_pct(err)}" + (f" ({worst.model} ctx {worst.ctx})" if worst else ""),
            ref="llama-server's breakdown at exit",
            figure=f"worst {_pct(err)}",
            data={"worst_err": err},
        )
    )
    return rows
