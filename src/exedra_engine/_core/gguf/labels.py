"""What a GGUF header says about how a model talks: whether it carries a chat template, and
whether it was tuned to follow instructions. Pure.

Only what the header says is claimed. A converter writes ``general.finetune`` from the
model's name (``gemma-3-270m-it`` gives ``it``), so a name word is the header's own word; a
header that names no tuning leaves it unknown ("").
"""

from __future__ import annotations

import re
from typing import Final

CHAT_TEMPLATE: Final = "tokenizer.chat_template"
"""The default chat template's key (named ones, ``tokenizer.chat_template.NAME``, are extra)."""
LABELS: Final = ("general.finetune", "general.basename")
"""The string keys `tuning` reads besides ``general.name``."""

_INSTRUCT: Final = frozenset({"it", "instruct", "instruction", "chat"})
_BASE: Final = frozenset({"base", "pt", "pretrained"})
_WORD: Final = re.compile(r"[a-z0-9]+")


def tuning(finetune: str, name: str = "", basename: str = "") -> str:
    """``instruct`` or ``base`` when the header's ``general.finetune``, ``general.name`` or
    ``general.basename`` says so in a word of its own (``it``, ``instruct``, ``chat``;
    ``base``, ``pt``); "" when none does, or when they disagree."""
    words: set[str] = set()
    for s in (finetune, name, basename):
        words.update(_WORD.findall(s.lower()))
    instruct, base = bool(words & _INSTRUCT), bool(words & _BASE)
    if instruct == base:
        return ""
    return "instruct" if instruct else "base"
