"""Row 2: pure planning (five layers) and explain_launch, against a bare dict merge.

Timed in CPU time of this process (`time.process_time`), the plan and the merge alike: on a
shared machine wall time counts every wait for a core another process holds."""

from __future__ import annotations

import time
import timeit
from pathlib import Path

from bench.common import Row, med, scored, us
from bench.goals import PLAN_MERGE_RATIO, PLAN_S

N = 2


def run(tmp: Path, quick: bool) -> list[Row]:
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
    cpu = time.process_time
    ref: list[float] = []
    for _ in range(9):  # interleaved, so drift on a shared machine hits all three alike
        ours.append(timeit.timeit(lambda: plan_launch(spec, hw, con), number=n, timer=cpu) / n)
        explained.append(
            timeit.timeit(lambda: explain_launch(spec, hw, con), number=n, timer=cpu) / n
        )
        ref.append(timeit.timeit(bare, number=n * 10, timer=cpu) / (n * 10))
    ratio = med(ours) / med(ref)
    goal = PLAN_S
    explain_ratio = med(explained) / med(ours)
    return [
        scored(
            "plan",
            what=f"pure planning, 5 layers, {len(p.args)} argv tokens (cpu)",
            ours=us(med(ours)),
            ref=f"goal {us(goal)}; bare dict merge {us(med(ref))}",
            figure=(
                f"{med(ours) / goal:.2f}x the goal; {ratio:.1f}x the merge "
                f"({ratio / PLAN_MERGE_RATIO:.2f}x its goal of {PLAN_MERGE_RATIO}x)"
            ),
            data={
                "ours_s": med(ours),
                "goal_s": goal,
                "goal_ratio": med(ours) / goal,
                "ref_s": med(ref),
                "ratio": ratio,
                "argv_tokens": len(p.args),
            },
        ),
        scored(
            "explain",
            what="explain_launch vs plan_launch, same case (cpu)",
            ours=us(med(explained)),
            ref=f"plan_launch {us(med(ours))}",
            figure=f"{explain_ratio:.2f}x a plain plan",
            data={"ours_s": med(explained), "ref_s": med(ours), "ratio": explain_ratio},
        ),
    ]
