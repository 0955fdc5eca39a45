"""The asyncio adapter (`exedra_engine.aio` is its public face)."""
