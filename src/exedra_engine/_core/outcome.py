"""The one place a raised `EngineError` becomes a `returns` Result.

Inside the library, failures are raised as typed `EngineError`s (h11's model: cheap, and the
happy path reads straight). Each public function converts exactly once, at its boundary, with
`as_result`; the shells and the command line call the raising forms and never take a Result
apart again: under returns, ``case Success(v)`` types `v` as Any, which switches the type
checker off exactly where two layers meet. Anything that is not an `EngineError` is a bug and
propagates as itself.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from exedra_engine.errors import EngineError

if TYPE_CHECKING:
    from returns.result import Failure, Result, Success

P = ParamSpec("P")
T = TypeVar("T")


def as_result(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Result[T, EngineError]:
    """``fn(*args, **kwargs)`` as ``Success(value)``, or ``Failure(error)`` for the
    `EngineError` it raised."""
    success, failure = _constructors()
    try:
        return success(fn(*args, **kwargs))
    except EngineError as e:
        return failure(e)


@functools.cache
def _constructors() -> tuple[type[Success[Any]], type[Failure[Any]]]:
    # returns is imported on first use, not with the library: its ~20 modules are a tenth of
    # the command line's cold start, and the command line never makes a Result. Cached: an
    # import statement costs ~0.8 us a call, 3% of a plan.
    from returns.result import Failure, Success

    return Success, Failure
