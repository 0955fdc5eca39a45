"""Did you mean: the name most like one written wrong, among a table's flags or an executor's
variables.

difflib (8 ms to import) is imported where a did-you-mean is made: a plan's cold start, which
imports the checker through the planner, never pays for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from exedra_engine._core.executors.flags import FlagTable


def close_env(name: str, known: Sequence[str], prefix: str) -> str:
    """The variable of `known` most like `name` (compared after the executor's `prefix`), or ""."""
    if prefix and name.startswith(prefix):
        tails = {k[len(prefix) :]: k for k in known if k.startswith(prefix)}
        hit = close(name[len(prefix) :], list(tails), 0.6)
        return tails[hit] if hit else ""
    return close(name, known, 0.75)


def _names(table: FlagTable) -> list[str]:
    return [n for f in table.flags.values() for n in (*f.names, *f.negations)]


def did_you_mean(token: str, table: FlagTable) -> str:
    """The flag of `table` most like `token` (``--ctx-szie`` -> ``--ctx-size``, ``-ngll`` ->
    ``-ngl``), or ""."""
    return close(token, _names(table), 0.7)


def close(word: str, candidates: Sequence[str], cutoff: float) -> str:
    import difflib

    hit = difflib.get_close_matches(word, candidates, n=1, cutoff=cutoff)
    return hit[0] if hit else ""
