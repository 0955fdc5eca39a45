"""One flag table per executor kind: the single place that knows an executor's flags.

A table knows every spelling of a flag (``-c`` / ``--ctx-size``), its negations
(``--no-webui`` unsets what ``--webui`` sets), how many values follow it, the environment
variables the executor reads for it, and whether repeating it adds values (``--lora``) rather
than replacing them. The data is generated from the executors' own help texts
(`exedra_engine._core.executors._flagdata`); this module turns argv into items against it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal

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
    ``choice:a,b,c`` ("": any text; see `exedra_engine._core.executors.helptext`)."""


class Item(Value, frozen=True, kw_only=True):
    """One option of an argv with its values, or one token the table does not know, and
    where it stands in the argv it was read from."""

    tokens: tuple[str, ...]
    """The tokens to emit, normalized to the form the executor accepts."""
    key: str | None = None
    """The flag's canonical key; None for a token unknown to the table."""
    values: tuple[str, ...] = ()
    negated: bool = False
    at: int = 0
    """The index of its first token in the argv."""
    inline: bool = False
    """Written ``--flag=value`` (one token of the argv, two of `tokens`)."""
    problem: Problem | None = None
    """Why the executor or the planner refuses it (`FlagTable.read_items` only)."""

    @property
    def value_at(self) -> tuple[int, ...]:
        """The index in the argv of each of its values (the flag's own for the inline form)."""
        if self.inline:
            return (self.at,)
        return tuple(range(self.at + 1, self.at + 1 + len(self.values)))

    @property
    def name(self) -> str:
        """The flag as written (``--ctx-size`` of ``--ctx-size=8``); a token the table does
        not know as written, up to its ``=``."""
        tok = self.tokens[0]
        return tok.partition("=")[0] if self.key is None and flagish(tok) else tok


Problem = Literal["missing-value", "value-is-flag", "equals-form", "unknown-flag", "stray-value"]
"""What is wrong with one item (the checker's finding codes, `exedra_engine._core.config.findings`):
a flag whose argv ends before its values; a flag followed by another flag where its value
should be (checker reading only); ``--flag=value`` for a flag that takes no single value; a
token written as an option that the table does not know; a value that follows no flag
(the executor takes no positional arguments)."""

_Memo = dict[tuple[str, ...], tuple[tuple["Item", ...], "Item | None"]]
_MEMO_MAX = 512
"""Readings one table remembers (a few argvs per model served)."""

_NUMBER = re.compile(r"-\d*\.?\d+([eE][+-]?\d+)?")


def flagish(tok: str) -> bool:
    """Whether `tok` is written as an option (``-x``, ``--xyz``), not a negative number."""
    return len(tok) > 1 and tok[0] == "-" and not _NUMBER.fullmatch(tok)


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
        self._plain: dict[str, tuple[str, int]] = {
            n: (f.key, f.nargs) for n, (f, negated) in self._by_name.items() if not negated
        }
        """Each positive spelling's key and value count: the fast path of a reading."""
        self.repeatable_keys = frozenset(f.key for f in flags if f.repeatable)
        """The flags whose every occurrence counts (``--lora``), not only the last."""
        self._memo: tuple[_Memo, _Memo] = ({}, {})
        """Readings of argvs already read: a plan reads the same run_args, override and
        caller args every time. Items are immutable and a table's reading of an argv never
        changes, so a memo is invisible to callers."""

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
        items, bad = self._reading(argv, False)
        if bad is not None:
            raise PlanError(self._said(bad, where))
        return items

    def read_items(self, argv: Sequence[str], *, checking: bool = False) -> tuple[Item, ...]:
        """`split_items` without raising: each item that `split_items` would refuse carries
        its `Item.problem` (the reading goes on after it).

        With `checking`, the config checker's reading (`exedra_engine._core.config.check`), which
        guesses at what a person meant rather than at what the executor does: a flag
        followed by a flag (or by anything ``--``) takes no more values there
        (``value-is-flag``); an unknown option takes the non-option tokens after it as its
        values (``unknown-flag``); a value that follows no flag is a ``stray-value``.
        """
        return self._reading(argv, checking)[0]

    def _reading(self, argv: Sequence[str], checking: bool) -> tuple[tuple[Item, ...], Item | None]:
        memo = self._memo[checking]
        key = argv if type(argv) is tuple else tuple(argv)
        hit = memo.get(key)
        if hit is None:
            if len(memo) >= _MEMO_MAX:
                memo.clear()
            hit = memo[key] = self._read(key, checking)
        return hit

    def _read(self, argv: tuple[str, ...], checking: bool) -> tuple[tuple[Item, ...], Item | None]:
        # The one place that decides which token of an argv is a flag and which a value.
        plain = None if checking else self._plain.get
        items: list[Item] = []
        bad: Item | None = None
        n = len(argv)
        i = 0
        while i < n:
            p = plain(argv[i]) if plain is not None else None
            if p is not None and i + 1 + p[1] <= n:
                # The common case, a known flag with all its values: no more to decide.
                j = i + 1 + p[1]
                items.append(Item(tokens=argv[i:j], key=p[0], values=argv[i + 1 : j], at=i))
                i = j
                continue
            i, refused = self._one(argv, i, checking, items.append)
            if bad is None:
                bad = refused
        return tuple(items), bad

    def _one(
        self, argv: tuple[str, ...], at: int, checking: bool, append: Callable[[Item], None]
    ) -> tuple[int, Item | None]:
        """Read the item at `at` (any form); returns the index after it, and the item if it
        is a flag's with a `Item.problem`."""
        get = self._by_name.get
        tok = argv[at]
        hit = get(tok)
        inline: str | None = None
        if hit is None:
            if tok[:1] == "-" and "=" in tok:
                tok, _, inline = tok.partition("=")
                hit = get(tok)
            if hit is None:
                if checking:
                    return _unknown(argv, at, append), None
                append(Item(tokens=(argv[at],), at=at))
                return at + 1, None
        flag, negated = hit
        nargs = 0 if negated else flag.nargs
        i = at + 1
        problem: Problem | None = None
        if inline is not None:
            values: tuple[str, ...] = (inline,) if nargs == 1 else ()
            problem = None if nargs == 1 else "equals-form"
        elif checking or i + nargs > len(argv):
            values, problem = _short(argv, i, nargs, get if checking else None)
            i += len(values)
        else:
            values = argv[i : i + nargs]
            i += nargs
        it = Item(
            tokens=(tok, *values),
            key=flag.key,
            values=values,
            negated=negated,
            at=at,
            inline=inline is not None,
            problem=problem,
        )
        append(it)
        return i, it if problem is not None else None

    def nargs(self, it: Item) -> int:
        """How many values the flag of `it` takes (0 for a negation or an unknown token)."""
        if it.key is None or it.negated:
            return 0
        return self.flags[it.key].nargs

    def _said(self, it: Item, where: str) -> str:
        tok, nargs = it.tokens[0], self.nargs(it)
        if it.problem == "equals-form":
            return f"{where}: flag {tok} takes {nargs} values, not '{tok}=...'"
        return f"{where}: flag {tok} needs {'a value' if nargs == 1 else f'{nargs} values'}"


def _unknown(argv: Sequence[str], at: int, append: Callable[[Item], None]) -> int:
    """The checker's reading of a token the table does not know, at `at`; returns the index
    after it."""
    tok = argv[at]
    if not flagish(tok):
        append(Item(tokens=(tok,), at=at, problem="stray-value"))
        return at + 1
    i = at + 1
    while i < len(argv) and not flagish(argv[i]):
        i += 1  # its values, presumably: judged with it
    rest = tuple(argv[at + 1 : i])
    append(Item(tokens=(tok, *rest), values=rest, at=at, problem="unknown-flag"))
    return i


def _short(
    argv: Sequence[str], i: int, nargs: int, flag_at: Callable[[str], object] | None
) -> tuple[tuple[str, ...], Problem | None]:
    """The values from `i` of a flag that takes `nargs`, when the argv ends before them or
    (`flag_at`: the table's lookup, for the checker's reading) a flag stands where a value
    should."""
    j = i
    while i < len(argv) and i - j < nargs:
        nxt = argv[i]
        if flag_at is not None and (flag_at(nxt.partition("=")[0]) is not None or nxt[:2] == "--"):
            return tuple(argv[j:i]), "value-is-flag"
        i += 1
    values = tuple(argv[j:i])
    return values, None if len(values) == nargs else "missing-value"


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
    """The table of `binary` from its generated rows
    (see `exedra_engine._core.executors._flagdata`)."""
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
