"""What the planner refuses in a request before it plans: a capability or a model the
executor cannot serve, an option it lacks, and values no executor or client could carry."""

from __future__ import annotations

import re

from exedra_engine._core.config.value_problems import too_many_threads
from exedra_engine._core.executors.profile import ExecutorProfile
from exedra_engine._core.plan.layers import unfit
from exedra_engine._core.struct import freeze
from exedra_engine._core.values import Constraints, ModelInfo, ModelSpec
from exedra_engine.constants import MAX_THREADS
from exedra_engine.errors import PlanError


def check_request(
    p: ExecutorProfile, spec: ModelSpec, c: Constraints, model: ModelInfo | None
) -> None:
    """Raise `PlanError` for what `p`'s executor, or a client, could not take from the
    request."""
    _check_serves(p, spec, model)
    _check_options(p, c)
    if not spec.path:
        raise PlanError("the model path is empty")
    for what, value in (
        ("host", c.host),
        ("model path", spec.path),
        ("model id", spec.id),
        ("API key", c.api_key),
    ):
        why = unfit(value)
        if why:
            raise PlanError(f"the {what} {why}")
    for what, n in (("ctx", c.ctx), ("threads", c.threads)):
        if not 0 <= n <= _INT32_MAX:
            raise PlanError(f"{what} {n} is outside 0-{_INT32_MAX} (0: the executor's default)")
    if c.threads > MAX_THREADS:
        raise PlanError(too_many_threads(f"threads {c.threads} ({p.threads_flag})", p.binary))


def _check_serves(p: ExecutorProfile, spec: ModelSpec, model: ModelInfo | None) -> None:
    for cap in spec.capabilities:
        if cap not in p.capabilities:
            raise PlanError(
                f"capability {cap!r} cannot be served by {p.binary} "
                f"(kind {spec.kind} serves: {', '.join(p.capabilities)})"
            )
    if model is not None and not p.serves_architecture(model.architecture):
        raise PlanError(
            f"{spec.path}: a {model.architecture} model cannot be served by {p.binary} "
            f"(kind {spec.kind})" + (f"; {p.format_hint}" if p.format_hint else "")
        )


def _check_options(p: ExecutorProfile, c: Constraints) -> None:
    if c.api_key and not p.has_api_key:
        raise PlanError(
            f"{p.binary} has no API key option: an api_key cannot be enforced for kind "
            f"{p.kind}; put an authenticating proxy in front of it instead"
        )
    if c.ctx and not p.ctx_flag:
        raise PlanError(f"{p.binary} has no context-size option (ctx)")
    if _CONTROL.search(c.api_key):
        # Not sendable: an HTTP header cannot carry it, so no client could authenticate.
        raise PlanError(
            "the API key contains a control character (a newline, a tab, ...), which no "
            "client can send in an Authorization header"
        )
    if c.api_key and c.api_key.strip() != c.api_key:
        # Clients and servers strip a header value's outer blanks: it would never match.
        raise PlanError(
            "the API key begins or ends with a blank (or is only blanks), which an "
            "Authorization header loses in transit"
        )
    if p.key_separator in c.api_key:
        raise PlanError(
            f"the API key contains {_CHAR_NAMES.get(p.key_separator, repr(p.key_separator))}, "
            f"which {p.binary} would split into several keys"
        )


_CONTROL = re.compile("[\x00-\x1f\x7f]")
_CHAR_NAMES = freeze({",": "a comma", ";": "a semicolon", " ": "a space"})
_INT32_MAX = 2**31 - 1  # the executors read these with std::stoi
