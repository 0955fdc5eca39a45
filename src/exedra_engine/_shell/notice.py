"""What a shell says while it waits (a binary that is slow to print its help): the command
line installs a hook that prints it; a library caller hears nothing. A module of its own so
that installing the hook loads nothing else."""

from __future__ import annotations

from collections.abc import Callable

hook: Callable[[str], None] | None = None


def say(message: str) -> None:
    """Pass `message` to the hook, if one is installed."""
    if hook is not None:
        hook(message)
