"""Findings: what in an override file, or in a plan's layers, the executor would refuse, ignore
or read otherwise than written, judged by a flag table. Pure: tables and files are arguments.

The planner passes unknown tokens through and splits ``--flag=value``; the executor then
refuses to start on the production host. These checks say so before anything starts, each
finding naming the file, the line, the field path and the token (`Finding`, whose codes
`exedra_engine._core.config.findings` lists).

A layer is one list of args with its env (``engines.llama`` of one file, ``models.qwen`` of
one file, the caller's args). ``models:`` entries apply to a model of any kind: a finding
there is judged by the executor whose flags the entry uses (the kind whose table knows the most
of them), or, on a tie, only when it holds for each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from exedra_engine._core.config.findings import Finding
from exedra_engine._core.config.judge import Judge
from exedra_engine._core.config.judge_args import judge_args
from exedra_engine._core.config.parse import LocatedConfig, field_path
from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.flags import FlagTable
from exedra_engine._core.executors.profile import ExecutorProfile, Executors


def check_file(
    located: LocatedConfig,
    tables: Mapping[str, FlagTable] | None = None,
    *,
    executors: Executors = BUILTIN,
) -> tuple[Finding, ...]:
    """The findings of one override file, judged by `tables` (by kind; a kind not in it by
    its profile's bundled table), in the order of the file's lines."""
    judge = Judge(tables or {}, located, executors)
    _judge_config(judge, located, only=None, model_id=None)
    return _ordered(judge.out)


def check_plan_layers(
    p: ExecutorProfile,
    table: FlagTable,
    *,
    files: Sequence[LocatedConfig] = (),
    model_id: str = "",
    run_args: Sequence[str] = (),
    caller_args: Sequence[str] = (),
    caller_env: Sequence[tuple[str, str]] = (),
    executors: Executors = BUILTIN,
) -> tuple[Finding, ...]:
    """The findings of what a plan for a model of `p`'s kind (and id `model_id`) takes from
    each layer, judged by `table`: the override files' sections that reach it, its run_args,
    and the caller's args and env."""
    kind = p.kind
    judge = Judge({kind: table}, None, executors)
    judge_args(judge, [p], run_args, "run_args", scope="")
    for f in files:
        fj = Judge({kind: table}, f, executors)
        _judge_config(fj, f, only=p, model_id=model_id)
        judge.out.extend(fj.out)
    judge_args(judge, [p], caller_args, "caller args", scope="")
    judge.env([p], dict(caller_env), "caller env", scope="")
    if model_id:  # "" is no id (no alias): only an id given is judged, as a models: key is
        judge.model_id(model_id, "caller id")
    return tuple(judge.out)


def _judge_config(
    judge: Judge, located: LocatedConfig, *, only: ExecutorProfile | None, model_id: str | None
) -> None:
    """Judge `located`'s sections: all, or `only` those that reach a model of that profile's
    kind (and id `model_id`)."""
    c = located.config
    ex = judge.executors
    every = ex.profiles if only is None else (only,)
    judge.env(every, c.env, "$.env", scope="every model", every_kind=True)
    for k, o in c.engines.items():
        if only is not None and k != only.kind:
            continue
        p = only or ex.profile(k)
        base = field_path("$.engines", k)
        scope = f"every model of kind {k}"
        judge_args(judge, [p], o.args, field_path(base, "args"), scope=scope)
        judge.env([p], o.env, field_path(base, "env"), scope=scope)
    for m, o in c.models.items():
        if model_id is not None and m != model_id:
            continue
        base = field_path("$.models", m)
        judge.model_id(m, base)
        scope = f"model {m}"
        judge_args(judge, every, o.args, field_path(base, "args"), scope=scope)
        judge.env(every, o.env, field_path(base, "env"), scope=scope)


def _ordered(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    return tuple(sorted(findings, key=lambda f: (f.file, f.line)))
