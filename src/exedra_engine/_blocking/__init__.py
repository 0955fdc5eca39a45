"""The blocking adapter (`exedra_engine.blocking` is its public face)."""
