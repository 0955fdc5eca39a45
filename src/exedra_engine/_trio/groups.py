"""No trio ExceptionGroup reaches a caller: trio wraps whatever leaves a nursery in a
`BaseExceptionGroup` (strict exception groups), even one exception, and a Ctrl-C during a
load came out as ``BaseExceptionGroup([KeyboardInterrupt])`` where the asyncio and blocking
adapters raise a plain `KeyboardInterrupt`. The public entry points raise the one exception
itself (`lone`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


def leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The exceptions in `group` and in the groups it holds, in order."""
    out: list[BaseException] = []
    for e in group.exceptions:
        out += leaves(e) if isinstance(e, BaseExceptionGroup) else [e]
    return out


def lone(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception `group` stands for: its only leaf; or, when there are several, the
    `KeyboardInterrupt` among them (the others are its consequences: tasks torn down by it).
    None when several unrelated errors really happened together."""
    found = leaves(group)
    if len(found) == 1:
        return found[0]
    return next((e for e in found if isinstance(e, KeyboardInterrupt)), None)


@asynccontextmanager
async def ungrouped() -> AsyncIterator[None]:
    """Within the block, an exception group that stands for one exception is raised as that
    exception (its own traceback kept)."""
    try:
        yield
    except BaseExceptionGroup as group:
        one = lone(group)
        if one is None:
            raise
        raise one from None
