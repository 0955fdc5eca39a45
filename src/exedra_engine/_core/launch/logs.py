"""An executor's output as lines: split, capped, redacted, with the last ones kept. Pure.

Bytes go in as they come off the pipe, in chunks of any size; whole lines come out, each
ending in ``\\n`` and with every secret the plan hands the executor hidden. An adapter (trio,
asyncio, blocking) only reads the pipe, feeds this, and forwards what it returns.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Final

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.plan.endpoint import Resolved
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.secrets import TextRedactor, plan_secrets

MAX_LINE: Final = 1 << 16
"""A line longer than this is cut: an executor printing a megabyte with no newline must not
make the reader hold it all."""
TAIL_LINES: Final = 40
"""How many of the last lines are kept: an exit is classified by them (a crash handler's
backtrace can push the cause up by a dozen lines), an error shows the last few."""
FIRST_ERRORS: Final = 4
"""How many of the first lines that start with ``error`` are kept beyond the tail:
whisper-server says ``error: unknown argument: --temp``, then prints its whole usage (some
70 lines) and exits 0, which would push the cause out of the tail."""


class LogLines:
    """Splits output into redacted lines and keeps the last `tail` of them as text."""

    def __init__(self, secrets: Iterable[str], tail: int = TAIL_LINES) -> None:
        self._redactor = TextRedactor(secrets)
        self._buf = b""
        self.tail: collections.deque[str] = collections.deque(maxlen=tail)
        self._errors: list[tuple[int, str]] = []
        self.count = 0
        """Lines seen so far (a reader may tell activity from it)."""

    def feed(self, chunk: bytes) -> list[bytes]:
        """The whole lines `chunk` completes, redacted, each ending in a newline."""
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        if len(self._buf) > MAX_LINE:
            cut = self._cut(self._buf)
            lines.append(self._buf[:cut])
            self._buf = self._buf[cut:]
        return [self._line(line) for line in lines]

    def _cut(self, buf: bytes) -> int:
        """Where an over-long line is cut: before its last ``longest key - 1`` bytes, where
        a key may still be arriving, and never inside a key, which is then hidden whole in
        one piece or the next, not shown in two halves."""
        cut = max(len(buf) - max(self._redactor.longest - 1, 0), MAX_LINE // 2)
        for start, end in self._redactor.key_spans(buf):
            if start < cut < end:
                return end
        return cut

    def end(self) -> list[bytes]:
        """The unterminated last line, if any, once the output has ended."""
        rest, self._buf = self._buf, b""
        return [self._line(rest)] if rest else []

    def _line(self, raw: bytes) -> bytes:
        line = self._redactor.bytes(raw + b"\n")
        text = line.decode("utf-8", errors="replace").rstrip("\n")
        self.tail.append(text)
        if len(self._errors) < FIRST_ERRORS and text.lstrip().lower().startswith("error"):
            self._errors.append((self.count, text))
        self.count += 1
        return line

    def kept(self) -> tuple[str, ...]:
        """The lines an exit is judged by: the first error lines that have left the tail
        (in order), then the tail."""
        first_in_tail = self.count - len(self.tail)
        return (*(t for n, t in self._errors if n < first_in_tail), *self.tail)


def log_secrets(
    plan: LaunchPlan, resolved: Resolved, *, executors: Executors = BUILTIN
) -> tuple[str, ...]:
    """Every secret `plan` hands its executor, which its log lines may quote: the API keys
    it will accept, and any key flag's or secret variable's value (HF_TOKEN, --hf-token)."""
    return (*resolved.api_keys, *plan_secrets(plan.args, plan.env, executors=executors))
