"""Row 11: several executors on one host. Two llama-servers (the real Gemma 3 270M and a
generated model) and a whisper-server under concurrent load, every member answering: the
aggregate tokens/s and the p50 latency with the group plan's partition (each member its own
CPUs and threads) against each executor planned alone at its defaults; and the group's
planned resident total against the measured sum of the members' peaks."""

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
PREDICT = 32


def run(tmp: Path, quick: bool) -> list[Row]:
    import exedra_engine as engine
    from exedra_engine.testing import write_tiny_llama, write_tiny_whisper, write_wav

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
    small = write_tiny_llama(tmp / "small.gguf")
    asr = write_tiny_whisper(tmp / "asr.bin")
    wav = write_wav(tmp / "tone.wav", seconds=1.0).read_bytes()
    specs = (
        engine.ModelSpec(id="chat", path=str(gemma), kind=engine.Kind.LLAMA),
        engine.ModelSpec(id="small", path=str(small), kind=engine.Kind.LLAMA),
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
        results[name] = _load(which, wav, seconds)
        print(
            f"  group: {name}: {results[name]['tokens_s']:.1f} tokens/s, p50 "
            f"{ms(results[name]['p50_s'])}, peaks {results[name]['peaks']}",
            flush=True,
        )
    d, g = results["defaults"], results["group"]
    ratio = g["tokens_s"] / d["tokens_s"] if d["tokens_s"] else 0.0
    planned = sum(_planned(group, s.id) for s in group.shares)
    measured = sum(g["peaks"].values())
    err = (planned - measured) / measured if measured else 0.0
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
            ours=f"planned {planned >> 20} MiB",
            ref=f"sum of VmHWM {measured >> 20} MiB",
            figure=f"{err * 100:+.1f}%",
            data={"planned": planned, "measured": measured, "err": err, "peaks": g["peaks"]},
        ),
    ]


def msgspec_replace(c: Any, **kw: Any) -> Any:
    import msgspec

    return msgspec.structs.replace(c, **kw)


def _planned(group: Any, member: str) -> int:
    plan = group.plan_of(member)
    if plan.memory is not None:
        return int(plan.memory.host.total)
    return int(next(s.memory for s in group.shares if s.id == member))


def _load(group: Any, wav: bytes, seconds: float) -> dict[str, Any]:
    """Run `group`, one client per member for `seconds`, all at once; tokens/s of the llama
    members together, the p50 latency of every request, and each member's peak RSS."""
    import exedra_engine as engine

    latencies: list[float] = []
    tokens = [0]
    lock = threading.Lock()
    with engine.run_group(group, ready_timeout=120) as running:
        stop_at = time.monotonic() + seconds

        def client(member: str) -> None:
            inst = running[member]
            url = inst.endpoint.url
            while time.monotonic() < stop_at:
                t = time.monotonic()
                if inst.plan.spec.kind == engine.Kind.LLAMA:
                    got = _post(url + "/completion", {"prompt": PROMPT, "n_predict": PREDICT})
                    n = int(got.get("tokens_predicted", 0))
                else:
                    _inference(url + "/inference", wav)
                    n = 0
                with lock:
                    latencies.append(time.monotonic() - t)
                    tokens[0] += n

        threads = [threading.Thread(target=client, args=(m,)) for m in running]
        t0 = time.monotonic()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        wall = time.monotonic() - t0
        peaks = {m: _vm_hwm(running[m].pid) for m in running}
    return {
        "tokens_s": tokens[0] / wall,
        "p50_s": statistics.median(latencies) if latencies else 0.0,
        "requests": len(latencies),
        "peaks": peaks,
    }


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
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
    with urllib.request.urlopen(req, timeout=120) as r:
        r.read()
