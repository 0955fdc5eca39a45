"""No API key in what the library writes: forwarded log lines, the tail in error messages,
and reprs (issue 5: 6, the launcher's side)."""

from __future__ import annotations

from typing import Any

import trio
from hypothesis import given
from hypothesis import strategies as st
from tests.log_pump import feed

from exedra_engine._trio.logs import LogPump
from properties.strategies import keys


class Collect(trio.abc.SendStream):
    def __init__(self) -> None:
        self.data = b""

    async def send_all(self, data: Any) -> None:
        self.data += bytes(data)

    async def wait_send_all_might_not_block(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


@given(
    st.lists(keys, min_size=1, max_size=3),
    st.lists(
        st.text(
            st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=40
        ),
        max_size=8,
    ),
    st.integers(1, 50),
)
def test_log_lines_never_carry_a_key(ks: list[str], words: list[str], chunk: int) -> None:
    lines = [f"{w} {ks[i % len(ks)]} {w}" for i, w in enumerate(words)] + [f"key={ks[0]}"]
    raw = ("\n".join(lines) + "\n").encode()

    async def main() -> tuple[bytes, tuple[str, ...]]:
        sink = Collect()
        pump = LogPump(sink, tuple(ks))
        await feed(pump, raw, chunk)
        return sink.data, tuple(pump.tail)

    data, tail = trio.run(main)
    for k in ks:
        assert k.encode() not in data
        assert not any(k in line for line in tail)
    assert data.count(b"\n") == len(lines)


def test_a_key_inside_another_leaves_no_part_behind() -> None:
    async def main() -> bytes:
        sink = Collect()
        pump = LogPump(sink, ("sk-abc", "sk-abcdef"))
        await feed(pump, b"keys sk-abcdef and sk-abc\n")
        return sink.data

    assert trio.run(main) == b"keys <redacted> and <redacted>\n"
