"""A first answer that makes sense: `inspect` says whether the model has a chat template and
what the header says it was tuned for; a plan serving chat from a model without one carries a
note naming llama-server's fallback (ChatML) and the fix; the template is never read."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import pytest

import exedra_engine as engine
from exedra_engine._core.gguf.header import read_gguf_header
from exedra_engine._core.gguf.inventory_reader import read_gguf_inventory
from exedra_engine._core.gguf.labels import tuning
from exedra_engine._shell.plan import info_from_inventory
from exedra_engine.errors import NotGGUF
from exedra_engine.testing import write_header_model, write_tiny_llama
from tests.conftest import cli


def _string(s: bytes) -> bytes:
    return struct.pack("<Q", len(s)) + s


def _kv_string(key: str, value: bytes) -> bytes:
    return _string(key.encode()) + struct.pack("<I", 8) + _string(value)


def _kv_u32(key: str, value: int) -> bytes:
    return _string(key.encode()) + struct.pack("<I", 4) + struct.pack("<I", value)


class _TailFile(io.RawIOBase):
    """A file of `head`, `gap` zero bytes, then `tail`, made up as it is read (the gap is
    never held in memory); it counts the bytes read."""

    def __init__(self, head: bytes, gap: int, tail: bytes) -> None:
        self.head, self.tail = head, tail
        self.gap_end = len(head) + gap
        self.size = self.gap_end + len(tail)
        self.pos = self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        self.pos = (pos, self.pos + pos, self.size + pos)[whence]
        return self.pos

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        n = max(0, min(len(b), self.size - self.pos))
        start, end = self.pos, self.pos + n
        out = bytearray(n)
        if start < len(self.head):
            part = self.head[start:end]
            out[: len(part)] = part
        if end > self.gap_end:
            lo = max(start, self.gap_end)
            out[lo - start :] = self.tail[lo - self.gap_end : end - self.gap_end]
        b[:n] = out
        self.pos = end
        self.read_bytes += n
        return n


def test_the_template_is_never_read_only_its_length() -> None:
    n = 256 << 20  # a 256 MiB "template", which the file does hold
    head = (
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 5)
        + _kv_string("general.architecture", b"llama")
        + _kv_string("general.finetune", b"Instruct")
        + _string(b"tokenizer.chat_template")
        + struct.pack("<I", 8)
        + struct.pack("<Q", n)
    )
    tail = _kv_string("general.name", b"After-The-Template") + _kv_u32("llama.block_count", 2)
    src = _TailFile(head, n, tail)
    facts = read_gguf_header(src, src.size)  # type: ignore[arg-type]
    assert facts.chat_template == n
    assert facts.name == "After-The-Template" and facts.blocks == 2
    assert facts.finetune == "Instruct"
    assert src.read_bytes < 1 << 20  # the 256 MiB were skipped, not read


def test_a_template_longer_than_the_file_is_refused() -> None:
    head = (
        b"GGUF"
        + struct.pack("<IQQ", 3, 0, 2)
        + _kv_string("general.architecture", b"llama")
        + _string(b"tokenizer.chat_template")
        + struct.pack("<I", 8)
        + struct.pack("<Q", 1 << 40)
    )
    with pytest.raises(NotGGUF, match=r"tokenizer\.chat_template"):
        read_gguf_header(io.BytesIO(head), len(head))
    with pytest.raises(NotGGUF, match=r"tokenizer\.chat_template"):
        read_gguf_inventory(io.BytesIO(head), len(head))


def test_inspect_and_the_plan_agree_on_template_and_tuning(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "it.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("Tiny 1B")
    w.add_string("general.finetune", "it")
    w.add_uint32("llama.block_count", 1)
    w.add_uint32("llama.context_length", 512)
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    info = engine.inspect(path).unwrap()
    assert info.chat_template == len("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert info.tuning == "instruct"
    with path.open("rb") as f:
        inv, _, _ = read_gguf_inventory(f, path.stat().st_size, str(path))
    assert info_from_inventory(str(path), inv) == info


def _bare(tmp_path: Path) -> Path:
    """A model whose header has no chat template (Gemma 3 270M's case)."""
    return write_header_model(
        tmp_path / "bare.gguf", vocab=64, architecture="llama", name="Bare", context=2048
    )


def test_a_model_without_template_says_none_and_unknown_tuning(tmp_path: Path) -> None:
    model = _bare(tmp_path)
    info = engine.inspect(model).unwrap()
    assert info.chat_template == 0
    assert info.tuning == ""
    r = cli("inspect", str(model))
    assert r.returncode == 0
    assert "chat template none (llama-server formats chat in ChatML" in r.stdout
    assert "tuning        unknown (the header does not say)" in r.stdout
    assert json.loads(cli("inspect", str(model), "--json").stdout)["chat_template"] == 0


@pytest.mark.parametrize(
    ("finetune", "name", "basename", "want"),
    [
        ("it", "", "", "instruct"),
        ("", "Qwen2.5 7B Instruct", "Qwen2.5", "instruct"),
        ("", "Phi-3-mini-4k-chat", "", "instruct"),
        ("", "gemma-3-1b-pt", "gemma-3", "base"),
        ("base", "", "", "base"),
        ("", "Gemma 3 270m", "gemma-3", ""),  # the header names no tuning: unknown
        ("", "GPT-2 Italian", "gpt", ""),  # "it" only as a word of its own
        ("it", "base", "", ""),  # the header contradicts itself: no claim
    ],
)
def test_tuning_claims_only_what_the_header_says(
    finetune: str, name: str, basename: str, want: str
) -> None:
    assert tuning(finetune, name, basename) == want


def _plan(model: Path, *extra: str) -> tuple[int, str, str]:
    r = cli("plan", "--model", str(model), "--kind", "llama", "--no-config", *extra)
    return r.returncode, r.stdout, r.stderr


def test_plan_of_chat_without_a_template_notes_the_fallback_and_the_fix(tmp_path: Path) -> None:
    model = _bare(tmp_path)
    code, _, err = _plan(model)
    assert code == 0
    assert "note: the model has no chat template (tokenizer.chat_template)" in err
    assert "formats chat requests in ChatML" in err
    assert "/v1/completions" in err and "--chat-template" in err
    assert "[no-chat-template]" in err
    # a note is something to know, not a failure: --strict passes it
    code, _, err = _plan(model, "--strict")
    assert code == 0, err
    # --explain --json carries it as a finding with severity "note"
    code, out, _ = _plan(model, "--explain", "--json")
    found = [f for f in json.loads(out)["findings"] if f["code"] == "no-chat-template"]
    assert [f["severity"] for f in found] == ["note"]


@pytest.mark.parametrize(
    "fix",
    [
        ("--arg=--chat-template", "--arg=chatml"),
        ("--arg=--chat-template-file", "--arg=/etc/t.jinja"),
        ("--env", "LLAMA_ARG_CHAT_TEMPLATE=gemma"),
        ("--arg=--embedding",),  # no chat is served
        ("--capability", "embeddings"),
    ],
)
def test_no_note_once_a_template_is_named_or_no_chat_is_served(
    tmp_path: Path, fix: tuple[str, ...]
) -> None:
    model = _bare(tmp_path)
    code, _, err = _plan(model, *fix)
    assert code == 0, err
    assert "no-chat-template" not in err


def test_a_model_with_a_template_gets_no_note(tmp_path: Path) -> None:
    model = write_tiny_llama(tmp_path / "tiny.gguf")  # the demo's model carries one
    assert engine.inspect(model).unwrap().chat_template > 0
    code, _, err = _plan(model)
    assert code == 0 and "no-chat-template" not in err


def test_a_hand_made_model_info_is_not_judged() -> None:
    # chat_template None: the header was not read for it, so nothing is claimed
    spec = engine.ModelSpec(id="m", path="/m.gguf", kind=engine.Kind.LLAMA)
    hw = engine.Hardware(
        cpu=engine.CPU(threads=2),
        executors=(engine.ExecutorInfo(kind=engine.Kind.LLAMA, path="/usr/bin/llama-server"),),
    )
    info = engine.ModelInfo(path="/m.gguf", size=1, architecture="llama")
    e = engine.explain_launch(spec, hw, model=info).unwrap()
    assert e.findings == ()


def test_the_demo_says_how_to_fetch_the_real_model_when_it_is_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import trio

    from exedra_engine.cli.demo import demo_real

    monkeypatch.setenv("EXEDRA_TEST_MODEL", str(tmp_path / "absent.gguf"))
    assert trio.run(demo_real.ask_real_model) == 0
    out = capsys.readouterr().out
    assert "real model  not in the cache" in out and "scripts/fetch_model.py" in out


@pytest.mark.executor
@pytest.mark.slow
def test_the_demo_asks_the_real_model_a_completion_and_it_says_paris(
    llama_server: str, real_model: Path
) -> None:
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "EXEDRA_EXECUTORS_BIN": str(Path(llama_server).parent),
        "EXEDRA_TEST_MODEL": str(real_model),
    }
    r = subprocess.run(
        [sys.executable, "-m", "exedra_engine", "demo"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert (
        "real model  gemma-3-270m-q4_k_m.gguf (no chat template: asked for a completion)" in lines
    )
    assert "prompt      'The capital of France is the city of'" in lines
    (answer,) = [ln for ln in lines if ln.startswith("answer      ") and "random weights" not in ln]
    assert "Paris" in answer
