"""One flag table per executor kind: the single place that knows an executor's flags.

A table knows every spelling of a flag (``-c`` / ``--ctx-size``), its negations
(``--no-webui`` unsets what ``--webui`` sets), how many values follow it, the environment
variables the executor reads for it, and whether repeating it adds values (``--lora``) rather
than replacing them. The data is generated from the executors' own help texts
(`exedra_engine._core._flagdata`); this module turns argv into items against it.
"""

from __future__ import annotations

from collections.abc import Sequence

from exedra_engine._core.struct import Value
from exedra_engine.errors import PlanError


class Flag(Value, frozen=True, kw_only=True):
    """One executor option."""

    key: str
    """Canonical name: the option's last long spelling, e.g. ``--ctx-size``."""
    names: tuple[str, ...]
    negations: tuple[str, ...] = ()
    nargs: int = 0
    env: tuple[str, ...] = ()
    repeatable: bool = False
    takes: str = ""
    """What its value must be, as the executor's help says: ``int``, ``float``, ``number`` or
    ``choice:a,b,c`` ("": any text; see `exedra_engine._core.helptext`)."""


class Item(Value, frozen=True, kw_only=True):
    """One option of an argv with its values, or one token the table does not know."""

    tokens: tuple[str, ...]
    """The tokens to emit, normalized to the form the executor accepts."""
    key: str | None = None
    """The flag's canonical key; None for a token unknown to the table."""
    values: tuple[str, ...] = ()
    negated: bool = False


class FlagTable:
    """The flags of one executor."""

    def __init__(self, binary: str, flags: Sequence[Flag]) -> None:
        self.binary = binary
        self.flags: dict[str, Flag] = {f.key: f for f in flags}
        self._by_name: dict[str, tuple[Flag, bool]] = {}
        self._by_env: dict[str, Flag] = {}
        for f in flags:
            for n in f.names:
                self._by_name.setdefault(n, (f, False))
            for n in f.negations:
                self._by_name.setdefault(n, (f, True))
            for e in f.env:
                self._by_env.setdefault(e, f)
        self._env_names = frozenset(self._by_env)

    def lookup(self, token: str) -> tuple[Flag, bool] | None:
        """The flag a token names and whether it is a negation, or None."""
        return self._by_name.get(token)

    def flag_for_env(self, name: str) -> Flag | None:
        """The flag an environment variable sets, or None."""
        return self._by_env.get(name)

    @property
    def env_names(self) -> frozenset[str]:
        """Every environment variable the executor reads for a flag."""
        return self._env_names

    def split_items(self, argv: Sequence[str], where: str) -> tuple[Item, ...]:
        """Cut `argv` into items, raising `PlanError`.

        ``--flag=value`` of a known flag becomes ``--flag value``, the only form these
        executors accept; unknown tokens pass through one by one.

        `where` names the argv in errors ("caller args", "config models.qwen.args").
        """
        get = self._by_name.get
        items: list[Item] = []
        append = items.append
        n = len(argv)
        i = 0
        while i < n:
            tok = argv[i]
            i += 1
            hit = get(tok)
            inline: str | None = None
            if hit is None:
                if tok[:1] != "-" or "=" not in tok:
                    append(Item(tokens=(tok,)))
                    continue
                name, _, inline = tok.partition("=")
                hit = get(name)
                if hit is None:
                    append(Item(tokens=(tok,)))
                    continue
                tok = name
            flag, negated = hit
            nargs = 0 if negated else flag.nargs
            if inline is not None:
                if nargs != 1:
                    raise PlanError(f"{where}: flag {tok} takes {nargs} values, not '{tok}=...'")
                values: tuple[str, ...] = (inline,)
            elif nargs == 0:
                values = ()
            else:
                if i + nargs > n:
                    need = "a value" if nargs == 1 else f"{nargs} values"
                    raise PlanError(f"{where}: flag {tok} needs {need}")
                values = tuple(argv[i : i + nargs])
                i += nargs
            append(Item(tokens=(tok, *values), key=flag.key, values=values, negated=negated))
        return tuple(items)


def _key(names: tuple[str, ...], negations: tuple[str, ...]) -> str:
    longs = [n for n in names if n.startswith("--")] or list(names)
    if not longs:
        longs = [n for n in negations if n.startswith("--")] or list(negations)
    return longs[-1]


Row = tuple[tuple[str, ...], tuple[str, ...], int, tuple[str, ...], str]
"""One flag of a generated table: (names, negations, nargs, env, takes)."""
ShortRow = tuple[tuple[str, ...], tuple[str, ...], int, tuple[str, ...]]
"""A row without `takes` (what its value must be is then not known): (names, negations,
nargs, env), as profiles registered before tables said what values take."""


def table_from_rows(
    binary: str, rows: Sequence[Row | ShortRow], repeatable: frozenset[str]
) -> FlagTable:
    """The table of `binary` from its generated rows (see `exedra_engine._core._flagdata`)."""
    flags = []
    for row in rows:
        names, negations, nargs, env = row[0], row[1], row[2], row[3]
        takes = row[4] if len(row) == 5 else ""
        key = _key(names, negations)
        flags.append(
            Flag(
                key=key,
                names=names,
                negations=negations,
                nargs=nargs,
                env=env,
                repeatable=bool(repeatable & {key, *names}),
                takes=takes,
            )
        )
    return FlagTable(binary, flags)
