"""Findings: what in an override file, or in a plan's layers, the executor would refuse, ignore
or read otherwise than written, judged by a flag table. Pure: tables and files are arguments.

The planner passes unknown tokens through and splits ``--flag=value``; the executor then
refuses to start on the production host. These checks say so before anything starts, each
finding naming the file, the line, the field path and the token (`Finding`). The codes:

==================  ========  ===========================================================
code                severity  what
==================  ========  ===========================================================
unknown-flag        error     a flag the executor does not know (with a did-you-mean)
wrong-kind          error     a flag or variable of another executor kind
missing-value       error     a flag that takes a value, at the end of its list
value-is-flag       error     a flag that takes a value, followed by another flag
stray-value         error     a value that follows no flag taking one
equals-form         warning   ``--flag=value``: the planner splits it, the executor refuses
                              it (an error for a flag that takes no single value)
contradicts         error     a flag set on and off, or to two values, in one layer
unknown-env         error     a variable shaped like the executor's own that it does not read
bad-value           error     a value the executor refuses or misreads (``--ctx-size 16k``)
bad-model-id        error     a ``models:`` key that no model can have as its id
sets-endpoint       warning   an override that sets the bind address or the port
sets-api-key        warning   an override that sets an API key
invalid-file        error     a file the loader refuses (from `config --check`)
fitter-off          warning   an override that sets ``-ngl``, ``-ts``, ``-ot`` or a row or
                              tensor split mode: llama.cpp's own memory fitting is then off
unbounded-cache     warning   ``--cache-ram -1``: a host prompt cache without a size limit
==================  ========  ===========================================================

A layer is one list of args with its env (``engines.llama`` of one file, ``models.qwen`` of
one file, the caller's args). ``models:`` entries apply to a model of any kind: a finding
there is judged by the executor whose flags the entry uses (the kind whose table knows the most
of them), or, on a tie, only when it holds for each.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal

from exedra_engine._core.config.parse import LocatedConfig, field_path
from exedra_engine._core.executors.flags import Flag, FlagTable, Item, flagish
from exedra_engine._core.executors.profile import BUILTIN, ExecutorProfile, Executors
from exedra_engine._core.struct import Value
from exedra_engine.constants import MAX_THREADS

# difflib (8 ms to import) is imported where a did-you-mean is made: a plan's cold start,
# which imports this module through the planner, never pays for it.

Severity = Literal["error", "warning"]


class Finding(Value, frozen=True, kw_only=True):
    """One thing an override does otherwise than it says. Every field is always present in
    its JSON, in this order, so CI jobs can rely on the shape."""

    severity: Severity
    code: str
    """Stable identifier (see the module docstring)."""
    file: str = ""
    """The override file ("" for the caller's args and a model's run_args)."""
    line: int = 0
    """Line in `file`, from 1; 0 when not known."""
    path: str
    """Field path: ``$.engines.llama.args[2]``, or ``caller args[0]``."""
    token: str
    """The offending token or variable name, as written (a key flag's value is never shown)."""
    message: str
    suggestion: str = ""
    """What to write instead, when one thing is likely (``--ctx-size`` for ``--ctx-szie``)."""

    @property
    def where(self) -> str:
        """``file:line: path`` as far as known."""
        loc = f"{self.file}:{self.line}" if self.file and self.line else self.file
        return f"{loc}: {self.path}" if loc else self.path


_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(inf|infinity|nan)", re.I)
_INT_PREFIX = re.compile(r"\s*[+-]?\d+")
_FLOAT_PREFIX = re.compile(r"\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_SIZE = re.compile(r"(\d+)([kKmM])")
_INT32 = 2**31 - 1
_GGML_THREADS = frozenset(
    {"--threads", "--threads-batch", "--threads-draft", "--threads-batch-draft"}
)
"""The flags whose value is a count of ggml's compute threads (not ``--threads-http``)."""


def too_many_threads(shown: str, binary: str) -> str:
    """Why a thread count above `MAX_THREADS` (`shown` as the caller wrote it) is refused."""
    return (
        f"{shown} is more than {MAX_THREADS}, the most CPU threads ggml places "
        f"(GGML_MAX_N_THREADS); far more make {binary} abort (std::bad_alloc) once started"
    )


def value_problem(flag: Flag, value: str, binary: str, name: str = "") -> tuple[str, str] | None:
    """Why `binary` would refuse or misread `value` for `flag` (and what to write instead), or
    None when the table does not say what it takes or the value fits. `name` is the flag's
    spelling as written (default: its key)."""
    t = flag.takes
    name = name or flag.key
    if flag.key in _GGML_THREADS and _INT.fullmatch(value) and int(value) > MAX_THREADS:
        return too_many_threads(f"{name} {value}", binary), str(MAX_THREADS)
    if t == "int":
        return _int_problem(name, value, binary)
    if t in ("float", "number"):
        return _number_problem(name, value, binary)
    if t.startswith("choice:"):
        return _choice_problem(name, t[7:].split(","), value, binary)
    return None


def _number_problem(name: str, value: str, binary: str) -> tuple[str, str] | None:
    if _FLOAT.fullmatch(value):
        return None
    prefix = _FLOAT_PREFIX.match(value)
    if prefix:
        got = prefix.group().strip()
        return (
            f"{name} takes a number: {binary} reads {value!r} as {got} and ignores the rest",
            got,
        )
    return f"{name} takes a number: {binary} refuses {value!r} at start", ""


def _choice_problem(
    name: str, choices: list[str], value: str, binary: str
) -> tuple[str, str] | None:
    if value in choices:
        return None
    lower = [c for c in choices if c == value.lower()]
    return (
        f"{name} takes one of {', '.join(choices)}: {binary} refuses {value!r} at start",
        lower[0] if lower else _close(value, choices, 0.5),
    )


def _int_problem(name: str, value: str, binary: str) -> tuple[str, str] | None:
    if _INT.fullmatch(value):
        if abs(int(value)) <= _INT32:
            return None
        return f"{name}: {value} is out of an integer's range: {binary} refuses it", ""
    size = _SIZE.fullmatch(value)
    suggestion = ""
    if size:
        suggestion = str(int(size.group(1)) * (1024 if size.group(2) in "kK" else 1024 * 1024))
    prefix = _INT_PREFIX.match(value)
    if prefix:
        got = prefix.group().strip()
        return (
            f"{name} takes an integer: {binary} reads {value!r} as {got} "
            "(it stops at the first character that is not a digit)",
            suggestion or got,
        )
    return f"{name} takes an integer: {binary} refuses {value!r} at start", suggestion


class _Judge:
    """Collects the findings of one file or one plan."""

    def __init__(
        self,
        tables: Mapping[str, FlagTable],
        file: LocatedConfig | None,
        executors: Executors = BUILTIN,
    ) -> None:
        self.tables = tables
        self.file = file
        self.executors = executors
        self.out: list[Finding] = []

    def table(self, p: ExecutorProfile) -> FlagTable:
        return self.tables.get(p.kind) or p.flags

    def add(
        self,
        severity: Severity,
        code: str,
        path: str,
        token: str,
        message: str,
        *,
        suggestion: str = "",
    ) -> None:
        f = self.file
        self.out.append(
            Finding(
                severity=severity,
                code=code,
                file=f.source if f else "",
                line=f.line(path) if f else 0,
                path=path,
                token=token,
                message=message,
                suggestion=suggestion,
            )
        )

    # -- args ---------------------------------------------------------------------------

    def args(
        self, kinds: Sequence[ExecutorProfile], args: Sequence[str], path: str, *, scope: str
    ) -> None:
        """Judge `args` for the executor of `kinds` they fit: with several (a ``models:``
        entry, whose model may be of any kind), the kind whose table knows the most of their
        flags; on a tie, keep what holds for each of the tied kinds."""
        if len(kinds) > 1:
            score = {p.kind: sum(self._knows(p, t) for t in args) for p in kinds}
            top = max(score.values())
            kinds = [p for p in kinds if score[p.kind] == top]
        if len(kinds) == 1:
            _Args(self, kinds[0], args, path, scope).run()
            return
        per_kind = []
        for p in kinds:
            sub = _Judge(self.tables, self.file)
            _Args(sub, p, args, path, scope).run()
            per_kind.append(sub.out)
        common = set.intersection(*({(f.code, f.path) for f in out} for out in per_kind))
        self.out.extend(f for f in per_kind[0] if (f.code, f.path) in common)

    def _knows(self, p: ExecutorProfile, tok: str) -> bool:
        return flagish(tok) and self.table(p).lookup(tok.partition("=")[0]) is not None

    # -- env ----------------------------------------------------------------------------

    def env(
        self,
        kinds: Sequence[ExecutorProfile],
        env: Mapping[str, str],
        path: str,
        *,
        scope: str,
        every_kind: bool = False,
    ) -> None:
        """Judge the variables of `env` for the executors of `kinds`. With `every_kind` the
        section reaches every executor (the top-level ``env:``): a variable another kind
        reads is then not misplaced."""
        for name, value in env.items():
            path_of = field_path(path, name)
            self._variable(kinds, name, value, path_of, scope=scope, every_kind=every_kind)

    def _variable(
        self,
        kinds: Sequence[ExecutorProfile],
        name: str,
        value: str,
        path: str,
        *,
        scope: str,
        every_kind: bool,
    ) -> None:
        owners = [p for p in self.executors if _reads_prefix(p, name)]
        if not owners:
            return
        mine = [p for p in kinds if p in owners]
        if not mine:
            if every_kind:
                return
            other = owners[0]
            p = kinds[0]
            self.add(
                "error",
                "wrong-kind",
                path,
                name,
                f"{name} is read by {other.binary} (kind {other.kind}); {p.binary} (kind "
                f"{p.kind}) reads no such variable, so this does nothing",
            )
            return
        # The first executor of the section that reads it judges it.
        self._read_variable(mine[0], name, value, path, scope=scope)

    def _read_variable(
        self, p: ExecutorProfile, name: str, value: str, path: str, *, scope: str
    ) -> None:
        table = self.table(p)
        flag = table.flag_for_env(name)
        if flag is None and name not in _profile_env(p):
            envs = sorted(table.env_names | _profile_env(p))
            self.add(
                "error",
                "unknown-env",
                path,
                name,
                f"{p.binary} reads no variable {name}: it is ignored",
                suggestion=_close_env(name, envs, p.env_prefix),
            )
            return
        self._setting(p, flag, name, path, scope, is_env=True)
        if flag is None:
            return
        self.memory(
            p, flag, token=name, values=(value,) if flag.nargs == 1 else (), path=path, scope=scope
        )
        if flag.nargs == 1:
            problem = value_problem(flag, value, p.binary)
            if problem:
                message = f"{name}={value}: {problem[0]}"
                self.add("error", "bad-value", path, name, message, suggestion=problem[1])

    def _setting(
        self,
        p: ExecutorProfile,
        flag: Flag | None,
        token: str,
        path: str,
        scope: str,
        *,
        is_env: bool,
    ) -> None:
        """Warn of an override that moves the endpoint or sets a key for what it reaches
        (`scope`: "every model of kind llama"; "" for the caller's own layers: theirs to set).
        """
        if not scope:
            return
        key = flag.key if flag is not None else ""
        if key in (p.host_flag, p.port_flag) or token in (p.host_env, p.port_env):
            host = key == p.host_flag or (bool(p.host_env) and token == p.host_env)
            self.add(
                "warning",
                "sets-endpoint",
                path,
                token,
                f"sets the {'bind address' if host else 'port'} of {p.binary} for {scope}, "
                "over the one the planner chooses: clients must be told the new endpoint",
            )
        elif (p.key_env and token == p.key_env) or (key and key in p.key_flags):
            moved = f" (the planner moves it into {p.key_env}, out of argv)" if p.key_env else ""
            self.add(
                "warning",
                "sets-api-key",
                path,
                token,
                f"sets an API key of {p.binary} for {scope}; whoever can read this file can "
                "read the key" + ("" if is_env else moved),
            )

    def memory(
        self,
        p: ExecutorProfile,
        flag: Flag,
        *,
        token: str,
        values: Sequence[str],
        path: str,
        scope: str,
    ) -> None:
        """Warn of settings that take memory out of the executor's or the planner's hands:
        an override that switches the executor's own fitter off, an unbounded prompt cache."""
        role = {k: r for r, k in p.memory_flags.items()}.get(flag.key)
        if role == "cache_ram" and values and values[0].strip() == "-1":
            self.add(
                "warning",
                "unbounded-cache",
                path,
                token,
                f"{token} -1 lets {p.binary}'s host prompt cache grow without limit, per "
                "process: the plan cannot size its memory, and the kernel's OOM killer decides",
                suggestion="--cache-ram 2048",
            )
        if not scope:
            return
        row_split = role == "split_mode" and bool(values) and values[0].lower() in ("row", "tensor")
        if flag.key in p.fitter_off_flags or row_split:
            said = " ".join((token, *values[:1]))
            self.add(
                "warning",
                "fitter-off",
                path,
                token,
                f"{said} for {scope} switches {p.binary}'s own memory fitting off (it then "
                "neither shrinks the context nor moves layers to fit free device memory): "
                "the load fails when the layers do not fit",
            )

    # -- models: keys ---------------------------------------------------------------------

    def model_id(self, model_id: str, path: str) -> None:
        why = _bad_id(model_id, self.executors)
        if why:
            self.add("error", "bad-model-id", path, model_id, f"model id {model_id!r} {why}")


def _bad_id(model_id: str, executors: Executors) -> str:
    if not model_id:
        return "is empty: no model has an empty id, so this entry never applies"
    if model_id != model_id.strip():
        return "begins or ends with a space: no model's id does, so this never applies"
    if not model_id.isprintable():
        return "contains a control character"
    for p in executors:
        if p.alias_flag and p.alias_separator and p.alias_separator in model_id:
            return (
                f"contains {p.alias_separator!r}: {p.binary} splits {p.alias_flag} at it, so "
                "the model would be served under several names, none of them this one"
            )
    return ""


def _reads_prefix(p: ExecutorProfile, name: str) -> bool:
    return bool(p.env_prefix and name.startswith(p.env_prefix)) or name in _profile_env(p)


def _profile_env(p: ExecutorProfile) -> frozenset[str]:
    return frozenset(n for n in (p.host_env, p.port_env, p.key_env, p.ready_prefix_env) if n)


def _close_env(name: str, known: Sequence[str], prefix: str) -> str:
    if prefix and name.startswith(prefix):
        tails = {k[len(prefix) :]: k for k in known if k.startswith(prefix)}
        hit = _close(name[len(prefix) :], list(tails), 0.6)
        return tails[hit] if hit else ""
    return _close(name, known, 0.75)


def _names(table: FlagTable) -> list[str]:
    return [n for f in table.flags.values() for n in (*f.names, *f.negations)]


def did_you_mean(token: str, table: FlagTable) -> str:
    """The flag of `table` most like `token` (``--ctx-szie`` -> ``--ctx-size``, ``-ngll`` ->
    ``-ngl``), or ""."""
    return _close(token, _names(table), 0.7)


def _close(word: str, candidates: Sequence[str], cutoff: float) -> str:
    import difflib

    hit = difflib.get_close_matches(word, candidates, n=1, cutoff=cutoff)
    return hit[0] if hit else ""


class _Args:
    """One list of args against one executor's table."""

    def __init__(
        self, judge: _Judge, p: ExecutorProfile, args: Sequence[str], path: str, scope: str
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
        self.j._setting(p, flag, tok, self.at(at), self.scope, is_env=False)
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


# -- public entry points ------------------------------------------------------------------


def check_file(
    located: LocatedConfig,
    tables: Mapping[str, FlagTable] | None = None,
    *,
    executors: Executors = BUILTIN,
) -> tuple[Finding, ...]:
    """The findings of one override file, judged by `tables` (by kind; a kind not in it by
    its profile's bundled table), in the order of the file's lines."""
    judge = _Judge(tables or {}, located, executors)
    _judge_config(judge, located, kind=None, model_id=None)
    return _ordered(judge.out)


def check_plan_layers(
    kind: str,
    table: FlagTable,
    *,
    files: Sequence[LocatedConfig] = (),
    model_id: str = "",
    run_args: Sequence[str] = (),
    caller_args: Sequence[str] = (),
    caller_env: Sequence[tuple[str, str]] = (),
    executors: Executors = BUILTIN,
) -> tuple[Finding, ...]:
    """The findings of what a plan for a model of `kind` (and id `model_id`) takes from each
    layer, judged by `table`: the override files' sections that reach it, its run_args, and
    the caller's args and env."""
    p = executors.profile(kind)
    judge = _Judge({kind: table}, None, executors)
    judge.args([p], run_args, "run_args", scope="")
    for f in files:
        fj = _Judge({kind: table}, f, executors)
        _judge_config(fj, f, kind=kind, model_id=model_id)
        judge.out.extend(fj.out)
    judge.args([p], caller_args, "caller args", scope="")
    judge.env([p], dict(caller_env), "caller env", scope="")
    if model_id:  # "" is no id (no alias): only an id given is judged, as a models: key is
        judge.model_id(model_id, "caller id")
    return tuple(judge.out)


def _judge_config(
    judge: _Judge, located: LocatedConfig, *, kind: str | None, model_id: str | None
) -> None:
    c = located.config
    ex = judge.executors
    every = ex.profiles if kind is None else (ex.profile(kind),)
    judge.env(every, c.env, "$.env", scope="every model", every_kind=True)
    for k, o in c.engines.items():
        if kind is not None and k != kind:
            continue
        p = ex.profile(k)
        base = field_path("$.engines", k)
        scope = f"every model of kind {k}"
        judge.args([p], o.args, field_path(base, "args"), scope=scope)
        judge.env([p], o.env, field_path(base, "env"), scope=scope)
    for m, o in c.models.items():
        if model_id is not None and m != model_id:
            continue
        base = field_path("$.models", m)
        judge.model_id(m, base)
        scope = f"model {m}"
        judge.args(every, o.args, field_path(base, "args"), scope=scope)
        judge.env(every, o.env, field_path(base, "env"), scope=scope)


def _ordered(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    return tuple(sorted(findings, key=lambda f: (f.file, f.line)))


def has_errors(findings: Sequence[Finding], *, strict: bool = False) -> bool:
    """Whether any finding fails a check: an error, or with `strict` any finding at all."""
    return any(strict or f.severity == "error" for f in findings)


class TableOrigin(Value, frozen=True, kw_only=True, omit_defaults=True):
    """Which flag table a kind was judged by: the one bundled with the library, or the one an
    installed binary's own ``--help`` gave."""

    kind: str
    binary: str
    """The executor's name (``llama-server``)."""
    source: Literal["bundled", "binary", "recorded"]
    """``recorded``: the flags another host's probe recorded in its hardware file."""
    path: str = ""
    """The binary whose help was read ("" for the bundled table)."""
    version: str = ""
    """The binary's version, or the build the bundled table was made from; "" if unknown."""
    note: str = ""
    """Why the bundled table was used although a binary was named (its help gave no flags...);
    for a recorded table, where it was recorded."""

    def describe(self) -> str:
        """One line for humans: ``llama-server: /usr/bin/llama-server --help, version b6000``."""
        if self.source != "bundled":
            said = f"{self.binary}: {self.path} --help, version {self.version or 'not stated'}"
            return f"{said}, as {self.note}" if self.note else said
        made = f", made from {self.version}" if self.version else ""
        note = f" ({self.note})" if self.note else ""
        return f"{self.binary}: the bundled table{made}{note}"


def bundled_origin(p: ExecutorProfile, note: str = "") -> TableOrigin:
    """The origin of `p`'s bundled table."""
    return TableOrigin(
        kind=p.kind, binary=p.binary, source="bundled", version=p.table_version, note=note
    )
