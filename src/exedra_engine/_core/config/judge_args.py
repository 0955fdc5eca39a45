"""One list of args judged against one executor's flag table, through the table's own
reader (`FlagTable.read_items`)."""

from __future__ import annotations

from collections.abc import Sequence

from exedra_engine._core.config.did_you_mean import did_you_mean
from exedra_engine._core.config.judge import Judge
from exedra_engine._core.config.value_problems import value_problem
from exedra_engine._core.executors.flags import Flag, Item, flagish
from exedra_engine._core.executors.profile import ExecutorProfile


def judge_args(
    judge: Judge, kinds: Sequence[ExecutorProfile], args: Sequence[str], path: str, *, scope: str
) -> None:
    """Judge `args` for the executor of `kinds` they fit: with several (a ``models:``
    entry, whose model may be of any kind), the kind whose table knows the most of their
    flags; on a tie, keep what holds for each of the tied kinds."""
    if len(kinds) > 1:
        score = {p.kind: sum(_knows(judge, p, t) for t in args) for p in kinds}
        top = max(score.values())
        kinds = [p for p in kinds if score[p.kind] == top]
    if len(kinds) == 1:
        _Args(judge, kinds[0], args, path, scope).run()
        return
    per_kind = []
    for p in kinds:
        sub = Judge(judge.tables, judge.file)
        _Args(sub, p, args, path, scope).run()
        per_kind.append(sub.out)
    common = set.intersection(*({(f.code, f.path) for f in out} for out in per_kind))
    judge.out.extend(f for f in per_kind[0] if (f.code, f.path) in common)


def _knows(judge: Judge, p: ExecutorProfile, tok: str) -> bool:
    return flagish(tok) and judge.table(p).lookup(tok.partition("=")[0]) is not None


class _Args:
    """One list of args against one executor's table."""

    def __init__(
        self, judge: Judge, p: ExecutorProfile, args: Sequence[str], path: str, scope: str
    ) -> None:
        self.j = judge
        self.p = p
        self.table = judge.table(p)
        self.args = args
        self.path = path
        self.scope = scope
        self.set: dict[str, tuple[bool, tuple[str, ...], str, str]] = {}
        """Non-repeatable flags set so far: key -> (negated, values, token, path)."""

    def at(self, i: int) -> str:
        return f"{self.path}[{i}]"

    def run(self) -> None:
        # The table's own reader (`FlagTable.read_items`), in its checker's reading: each
        # item that the planner or the executor would refuse carries its problem.
        for it in self.table.read_items(self.args, checking=True):
            if it.key is None:
                if it.problem == "unknown-flag":
                    self.unknown(it.name, it.at)
                else:
                    tok = it.tokens[0]
                    self.j.add(
                        "error",
                        "stray-value",
                        self.at(it.at),
                        tok,
                        f"{tok!r} follows no flag that takes a value: {self.p.binary} refuses "
                        "it at start (it takes no positional arguments)",
                    )
                continue
            flag = self.table.flags[it.key]
            name = it.tokens[0]
            if it.inline and not self.equals(flag, name, self.table.nargs(it), it):
                continue
            self.missing(flag, name, it)
            self.judge(
                flag, name, it.negated, list(zip(it.values, it.value_at, strict=True)), it.at
            )

    def unknown(self, name: str, at: int) -> None:
        p = self.p
        others = [
            o
            for o in self.j.executors
            if o.kind != p.kind and self.j.table(o).lookup(name) is not None
        ]
        if others:
            o = others[0]
            self.j.add(
                "error",
                "wrong-kind",
                self.at(at),
                name,
                f"{name} is a flag of {o.binary} (kind {o.kind}); {p.binary} (kind {p.kind}) "
                "has no such flag and refuses to start on it",
            )
            return
        self.j.add(
            "error",
            "unknown-flag",
            self.at(at),
            name,
            f"{p.binary} has no flag {name}: the planner passes it through as written and "
            f"{p.binary} refuses to start on it",
            suggestion=did_you_mean(name, self.table),
        )

    def equals(self, flag: Flag, name: str, nargs: int, it: Item) -> bool:
        tok = self.args[it.at]
        shown = f"{name}=<redacted>" if flag.key in self.p.key_flags else tok
        if nargs != 1:
            self.j.add(
                "error",
                "equals-form",
                self.at(it.at),
                shown,
                f"{name} takes {nargs} values, so {name}=... cannot be split: the planner "
                "refuses it",
            )
            return False
        self.j.add(
            "warning",
            "equals-form",
            self.at(it.at),
            shown,
            f"the planner splits {shown} into two arguments, the only form {self.p.binary} "
            f"accepts; {self.p.binary} itself refuses {shown} (error: invalid argument), so "
            "this works only through the planner",
            suggestion=f"{name} {it.values[0]}" if flag.key not in self.p.key_flags else "",
        )
        return True

    def missing(self, flag: Flag, tok: str, it: Item) -> None:
        if it.problem == "missing-value":
            nargs = flag.nargs
            need = "a value" if nargs == 1 else f"{nargs} values"
            self.j.add(
                "error",
                "missing-value",
                self.at(it.at),
                tok,
                f"{tok} takes {need} but the list ends: the planner refuses it",
            )
        elif it.problem == "value-is-flag":
            end = it.at + 1 + len(it.values)
            nxt = self.args[end]
            self.j.add(
                "error",
                "value-is-flag",
                self.at(it.at),
                tok,
                f"{tok} takes a value but is followed by the flag {nxt}: the planner would "
                f"give {nxt} to {tok} as its value",
            )

    def judge(
        self, flag: Flag, tok: str, negated: bool, values: list[tuple[str, int]], at: int
    ) -> None:
        p = self.p
        self.j.setting(p, flag, tok, self.at(at), self.scope, is_env=False)
        vals_only = tuple(v for v, _ in values)
        self.j.memory(p, flag, token=tok, values=vals_only, path=self.at(at), scope=self.scope)
        if flag.key not in p.key_flags:
            for value, where in values[:1] if flag.nargs == 1 else ():
                problem = value_problem(flag, value, p.binary, tok)
                if problem:
                    msg, fix = problem
                    self.j.add("error", "bad-value", self.at(where), value, msg, suggestion=fix)
        if flag.repeatable:
            return
        vals = tuple(v for v, _ in values)
        said = " ".join((tok, *vals)) if flag.key not in p.key_flags else tok
        prior = self.set.get(flag.key)
        if prior is not None and (prior[0], prior[1]) != (negated, vals):
            line = self.j.file.line(prior[3]) if self.j.file else 0
            self.j.add(
                "error",
                "contradicts",
                self.at(at),
                tok,
                f"{said} contradicts {prior[2]} earlier in the same list "
                f"({f'line {line}' if line else prior[3]}): only the last one takes effect",
            )
        self.set[flag.key] = (negated, vals, said, self.at(at))
