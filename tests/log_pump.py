"""Feeding bytes through the launcher's log pump, as an executor's output would arrive."""

from __future__ import annotations

import trio
import trio.testing

from exedra_engine._trio.logs import LogPump


async def feed(pump: LogPump, data: bytes, chunk: int = 0) -> None:
    """Run `pump` over `data`, sent in `chunk`-byte pieces (0: all at once), until it has
    read and forwarded everything."""
    send, recv = trio.testing.memory_stream_one_way_pair()
    step = chunk or max(len(data), 1)
    async with trio.open_nursery() as n:
        n.start_soon(pump.read, recv)
        n.start_soon(pump.write)
        for at in range(0, len(data), step):
            await send.send_all(data[at : at + step])
        await send.aclose()
