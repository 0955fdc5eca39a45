"""The judge of a check: collects its findings, and judges what one setting does (the
endpoint, an API key, memory), the variables of an env, and a ``models:`` key. One list of args
is judged by `exedra_engine._core.config.judge_args`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from exedra_engine._core.config.did_you_mean import close_env
from exedra_engine._core.config.findings import Finding, Severity
from exedra_engine._core.config.parse import LocatedConfig, field_path
from exedra_engine._core.config.value_problems import value_problem
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import Flag, FlagTable
from exedra_engine._core.executors.profile import ExecutorProfile, Executors


class Judge:
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
                suggestion=close_env(name, envs, p.env_prefix),
            )
            return
        self.setting(p, flag, name, path, scope, is_env=True)
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

    def setting(
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
