"""The flag tables: generated from the real help texts, and argv splitting."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from exedra_engine import Kind, PlanError
from exedra_engine._core.executors.builtin import executor_profile

ROOT = Path(__file__).resolve().parents[2]
LLAMA, WHISPER = executor_profile(Kind.LLAMA).flags, executor_profile(Kind.TRANSCRIBE).flags


def test_generated_tables_match_the_reference_help() -> None:
    ref = ROOT.parent / "shared" / "reference"
    if not ref.is_dir():
        pytest.skip(f"no reference help texts at {ref}")
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_flag_tables.py"), "--check"], check=True
    )


@pytest.mark.parametrize(
    ("token", "key", "negated"),
    [
        ("-c", "--ctx-size", False),
        ("--ctx-size", "--ctx-size", False),
        ("-ngl", "--n-gpu-layers", False),
        ("--gpu-layers", "--n-gpu-layers", False),
        ("--no-webui", "--webui", True),
        ("--ui", "--webui", False),
        ("--no-ui", "--webui", True),
        ("-nkvo", "--kv-offload", True),
        ("-kvo", "--kv-offload", False),
        ("-no-kvu", "--kv-unified", True),
        ("--no-host", "--no-host", False),
        ("-hf", "--hf-repo", False),
        ("--embedding", "--embeddings", False),
    ],
)
def test_llama_spellings(token: str, key: str, negated: bool) -> None:
    hit = LLAMA.lookup(token)
    assert hit is not None
    assert (hit[0].key, hit[1]) == (key, negated)


def test_llama_env_variables_and_value_counts() -> None:
    assert LLAMA.flag_for_env("LLAMA_ARG_CTX_SIZE").key == "--ctx-size"  # type: ignore[union-attr]
    assert LLAMA.flags["--port"].env == ("LLAMA_ARG_PORT",)
    assert LLAMA.flags["--api-key"].env == ("LLAMA_API_KEY",)
    assert LLAMA.flags["--control-vector-layer-range"].nargs == 2
    assert LLAMA.flags["--override-tensor"].nargs == 1
    assert LLAMA.flags["--flash-attn"].nargs == 1
    assert LLAMA.flags["--lora"].repeatable and not LLAMA.flags["--ctx-size"].repeatable
    assert len(LLAMA.flags) > 200


def test_whisper_table() -> None:
    assert WHISPER.lookup("-ng")[0].key == "--no-gpu"  # type: ignore[index]
    assert WHISPER.lookup("-nfa") == (WHISPER.flags["--flash-attn"], True)
    assert WHISPER.flags["--tmp-dir"].nargs == 1  # not in its help text; see CORRECTIONS
    assert WHISPER.env_names == frozenset()
    assert WHISPER.lookup("--ctx-size") is None


def test_split_normalizes_and_keeps_unknown_tokens() -> None:
    items = LLAMA.split_items(
        [
            "--ctx-size=4096",
            "--frobnicate",
            "x",
            "-ngl",
            "-1",
            "--control-vector-layer-range",
            "1",
            "9",
        ],
        "caller args",
    )
    assert [i.tokens for i in items] == [
        ("--ctx-size", "4096"),
        ("--frobnicate",),
        ("x",),
        ("-ngl", "-1"),
        ("--control-vector-layer-range", "1", "9"),
    ]
    assert [i.key for i in items] == [
        "--ctx-size",
        None,
        None,
        "--n-gpu-layers",
        "--control-vector-layer-range",
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ctx-size"], "config models.q.args: flag --ctx-size needs a value"),
        (["--control-vector-layer-range", "1"], "needs 2 values"),
        (["--no-webui=1"], "flag --no-webui takes 0 values"),
    ],
)
def test_split_errors_name_the_layer_and_flag(argv: list[str], message: str) -> None:
    with pytest.raises(PlanError, match=re.escape(message)):
        LLAMA.split_items(argv, "config models.q.args")
