"""Tiny test models and the lookups of the real executors, for the demo, tests and benchmarks.

The writers of the tiny models (`exedra_engine.testing.models`: `write_tiny_llama`,
`write_arch_model`, `write_header_model`; `exedra_engine.testing.whisper`:
`write_tiny_whisper`, `write_wav`), and the lookups of the real executors, the real model and a
free port that the test fixtures and the benchmarks share (`exedra_engine.testing.lookups`).
Every name is re-exported here: this package is public, and its users import it as
``exedra_engine.testing``.

The writers import gguf and numpy when called; the rest of the library never does.
"""

from __future__ import annotations

from exedra_engine.testing.lookups import (
    REAL_MODEL_NAME,
    find_executor,
    find_real_model,
    free_port,
    real_model_path,
)
from exedra_engine.testing.models import (
    ARCH_SHAPES,
    TINY_ARCH,
    TINY_BLOCKS,
    TINY_CHAT_TEMPLATE,
    TINY_CONTEXT,
    TINY_NAME,
    TINY_WIDTH,
    ArchShape,
    write_arch_model,
    write_header_model,
    write_tiny_llama,
)
from exedra_engine.testing.whisper import WHISPER_VOCAB, write_tiny_whisper, write_wav

__all__ = [
    "ARCH_SHAPES",
    "TINY_CHAT_TEMPLATE",
    "REAL_MODEL_NAME",
    "TINY_ARCH",
    "TINY_BLOCKS",
    "TINY_CONTEXT",
    "TINY_NAME",
    "TINY_WIDTH",
    "WHISPER_VOCAB",
    "ArchShape",
    "find_executor",
    "find_real_model",
    "free_port",
    "real_model_path",
    "write_arch_model",
    "write_header_model",
    "write_tiny_llama",
    "write_tiny_whisper",
    "write_wav",
]
