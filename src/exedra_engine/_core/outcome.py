"""The one place a raised `EngineError` becomes a `returns` Result.

Inside the library, failures are raised as typed `EngineError`s (h11's model: cheap, and the
happy path reads straight). Each public function converts exactly once, at its boundary: an
entry point is written once, in its raising form, and `boundary` makes its Result form
(returns' ``@safe``, narrowed to `EngineError`); `as_result` converts one call. The shells and
the command line call the raising forms and never take a Result apart again: under returns,
``case Success(v)`` types `v` as Any, which switches the type checker off exactly where two
layers meet. Anything that is not an `EngineError` is a bug and propagates as itself.
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


def boundary(fn: Callable[P, T], /) -> Callable[P, Result[T, EngineError]]:
    """`fn`, the raising form of an entry point, as its Result form: the same parameters
    (for the type checker too) and docstring, returning ``Success(value)``, or
    ``Failure(error)`` for the `EngineError` `fn` raised. Anything else propagates.

    Used as ``load_config = boundary(read_config)``: the signature is written once, on the
    raising form the shells call, and the public name is the Result form."""

    @functools.wraps(fn)
    def at_boundary(*args: P.args, **kwargs: P.kwargs) -> Result[T, EngineError]:
        return as_result(fn, *args, **kwargs)

    return at_boundary


@functools.cache
def _constructors() -> tuple[type[Success[Any]], type[Failure[Any]]]:
    # returns is imported on first use, not with the library: its ~20 modules are a tenth of
    # the command line's cold start, and the command line never makes a Result. Cached: an
    # import statement costs ~0.8 us a call, 3% of a plan.
    from returns.result import Failure, Success

    return Success, Failure
