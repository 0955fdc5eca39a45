"""Row 11: several executors on one host. Two llama-servers (the real Gemma 3 270M, twice: a
generated model generates thousands of tokens a second and would be the whole aggregate) and
a whisper-server (a generated model) under concurrent load, one client per member, every
member answering: the aggregate tokens/s and the p50 latency with the group plan's partition
(each member its own CPUs and threads) against each executor planned alone at its defaults;
and the group's planned resident total against the measured sum of the members' peaks
(VmHWM after the load and one 700-token prompt per llama member, as row 10 measures a peak).
The llama plans' prompt-cache allowance (``--cache-ram``) fills only with prompts cached
between requests, which this load never does: the goal is judged on the planned total
without it, and the total with it is printed beside."""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench.common import Row, executor, ms, not_measurable, real_model, scored
from bench.rows.memory import _vm_hwm

N = 11
WHAT = "group of 3 (2 llama, 1 whisper) under concurrent load"
PROMPT = "Write one sentence about the sea."
PREDICT = 16
TIMEOUT = 300.0
"""Seconds one request may take: at an executor's defaults on a loaded host, minutes."""


def run(tmp: Path, quick: bool) -> list[Row]:
    import exedra_engine as engine
    from exedra_engine.testing import write_tiny_whisper, write_wav

    llama, whisper, gemma = executor("llama-server"), executor("whisper-server"), real_model()
    if llama is None or whisper is None or gemma is None:
        return [not_measurable(N, WHAT, "executors or the real model missing", ">=1.0x")]
    hw = engine.probe().unwrap()
    hw = engine.Hardware(
        cpu=hw.cpu,
        executors=(
            engine.ExecutorInfo(kind=engine.Kind.LLAMA, path=str(llama)),
            engine.ExecutorInfo(kind=engine.Kind.TRANSCRIBE, path=str(whisper)),
        ),
    )
    asr = write_tiny_whisper(tmp / "asr.bin")
    wav = write_wav(tmp / "tone.wav", seconds=1.0).read_bytes()
    specs = (
        engine.ModelSpec(id="chat", path=str(gemma), kind=engine.Kind.LLAMA),
        engine.ModelSpec(id="chat2", path=str(gemma), kind=engine.Kind.LLAMA),
        engine.ModelSpec(id="asr", path=str(asr), kind=engine.Kind.TRANSCRIBE),
    )
    ctx = engine.Constraints(ctx=2048)
    members = tuple(
        engine.GroupMember(
            spec=s, constraints=ctx if s.kind == engine.Kind.LLAMA else engine.Constraints()
        )
        for s in specs
    )
    group = engine.plan_group_on_host(members, hw).unwrap()
    alone = engine.GroupPlan(
        plans=tuple(
            engine.plan(p.spec, hw, msgspec_replace(m.constraints, port=share.port)).unwrap()
            for p, m, share in zip(group.plans, members, group.shares, strict=True)
        ),
        shares=tuple(engine.MemberShare(id=s.id, port=s.port) for s in group.shares),
    )
    seconds = 8.0 if quick else 20.0
    results = {}
    for name, which in (("defaults", alone), ("group", group)):
        results[name] = _load(which, wav, seconds, fill=name == "group")
        print(
            f"  group: {name}: {results[name]['tokens_s']:.1f} tokens/s, p50 "
            f"{ms(results[name]['p50_s'])}, peaks {results[name]['peaks']}",
            flush=True,
        )
    d, g = results["defaults"], results["group"]
    ratio = g["tokens_s"] / d["tokens_s"] if d["tokens_s"] else 0.0
    planned = {s.id: _planned(group, s.id, cache=False) for s in group.shares}
    with_cache = sum(_planned(group, s.id, cache=True) for s in group.shares)
    measured = sum(g["peaks"].values())
    err = (sum(planned.values()) - measured) / measured if measured else 0.0
    return [
        scored(
            "group_cpu",
            what=f"{WHAT}: aggregate llama tokens/s",
            ours=f"{g['tokens_s']:.1f} tok/s, p50 {ms(g['p50_s'])}",
            ref=f"each at its defaults {d['tokens_s']:.1f} tok/s, p50 {ms(d['p50_s'])}",
            figure=f"{ratio:.2f}x",
            data={"ratio": ratio, "group": g, "defaults": d, "seconds": seconds},
        ),
        scored(
            "group_memory",
            what="group: planned resident total vs the sum of measured peaks",
            ours=f"planned {sum(planned.values()) >> 20} MiB ({with_cache >> 20} with cache)",
            ref=f"sum of VmHWM {measured >> 20} MiB",
            figure=f"{err * 100:+.1f}%",
            data={
                "planned": sum(planned.values()),
                "planned_with_cache": with_cache,
                "planned_each": planned,
                "measured": measured,
                "err": err,
                "peaks": g["peaks"],
            },
        ),
    ]


def msgspec_replace(c: Any, **kw: Any) -> Any:
    import msgspec

    return msgspec.structs.replace(c, **kw)


def _planned(group: Any, member: str, *, cache: bool) -> int:
    """The member's planned resident peak: its memory plan's (less the prompt-cache
    allowance without `cache`), or whisper-server's estimate from its file."""
    from exedra_engine._core.executors.builtin import BUILTIN
    from exedra_engine._core.group.memory import whisper_resident

    plan = group.plan_of(member)
    if plan.memory is not None:
        host = plan.memory.host
        return int(host.total - (0 if cache else host.parts.prompt_cache))
    size = Path(plan.spec.path).stat().st_size
    return whisper_resident(BUILTIN.profile(plan.spec.kind), size)


def _load(group: Any, wav: bytes, seconds: float, *, fill: bool = False) -> dict[str, Any]:
    """Run `group`, one client per member for `seconds`, all at once; tokens/s of the llama
    members together, the p50 latency of every request, and each member's peak RSS."""
    import exedra_engine as engine

    latencies: list[float] = []
    tokens = [0]
    each: dict[str, list[float]] = {}
    made: dict[str, int] = {}
    failed: dict[str, int] = {}
    lock = threading.Lock()
    with engine.run_group(group, ready_timeout=120) as running:
        stop_at = time.monotonic() + seconds

        def client(member: str) -> None:
            inst = running[member]
            url = inst.endpoint.url
            while time.monotonic() < stop_at:
                t = time.monotonic()
                try:
                    if inst.plan.spec.kind == engine.Kind.LLAMA:
                        body = {"prompt": PROMPT, "n_predict": PREDICT}
                        n = int(_post(url + "/completion", body).get("tokens_predicted", 0))
                    else:
                        _inference(url + "/inference", wav)
                        n = 0
                except OSError:  # a timeout under the load: counted, not fatal
                    with lock:
                        failed[member] = failed.get(member, 0) + 1
                    continue
                with lock:
                    latencies.append(time.monotonic() - t)
                    each.setdefault(member, []).append(latencies[-1])
                    made[member] = made.get(member, 0) + n
                    tokens[0] += n

        threads = [threading.Thread(target=client, args=(m,)) for m in running]
        t0 = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.monotonic() - t0
        if fill:
            # After the timed load: one prompt past a 512-token ubatch per llama member, as
            # row 10 measures a peak, so the compute buffers are touched as a long prompt
            # touches them; all at once, as the members run together.
            llamas = [m for m in running if running[m].plan.spec.kind == engine.Kind.LLAMA]
            fills = [
                threading.Thread(target=_long_prompt, args=(running[m].endpoint.url,))
                for m in llamas
            ]
            for th in fills:
                th.start()
            for th in fills:
                th.join()
        peaks = {m: _vm_hwm(running[m].pid) for m in running}
    return {
        "tokens_s": tokens[0] / wall,
        "p50_s": statistics.median(latencies) if latencies else 0.0,
        "requests": len(latencies),
        "peaks": peaks,
        "failed": failed,
        "members": {
            m: {"requests": len(ls), "p50_s": statistics.median(ls), "tokens_s": made[m] / wall}
            for m, ls in each.items()
        },
    }


def _long_prompt(url: str) -> None:
    from exedra_engine.testing.models import _WORDS

    text = " ".join(_WORDS[i % len(_WORDS)] for i in range(1400))
    toks = _post(url + "/tokenize", {"content": text})["tokens"]
    prompt = _post(url + "/detokenize", {"tokens": toks[:700]})["content"]
    _post(url + "/completion", {"prompt": prompt, "n_predict": 4})


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        return json.loads(r.read() or b"{}")  # type: ignore[no-any-return]


def _inference(url: str, wav: bytes) -> None:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
            "Content-Type: audio/wav\r\n\r\n"
        ).encode()
        + wav
        + f"\r\n--{boundary}--\r\n".encode()
    )
    req = urllib.request.Request(
        url, data=body, headers={"Content-Type": f"multipart/form-data; boundary={boundary}"}
    )
    with urllib.request.urlopen(req, timeout=TIMEOUT) as r:
        r.read()
