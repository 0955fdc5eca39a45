"""Saved plans read back: ``plan --json`` (one `LaunchPlan`) and ``plan --group --json`` (a
`GroupPlan`), for ``emit PLAN.json`` and ``launch --group PLAN.json``, so that what CI
reviewed is what is deployed: nothing is probed or planned again.

The two are told apart by the group's own fields (``plans``, ``shares``); each is then
decoded strictly by its own type (`msgspec`'s decoder of `LaunchPlan` or `GroupPlan`), so an
edited file with a misspelt field is an error naming the file and the field, never a field
dropped."""

from __future__ import annotations

import argparse
from collections.abc import Mapping

import msgspec

from exedra_engine._core.group.values import GroupPlan
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.secrets import REDACTED
from exedra_engine.errors import EngineError, PlanError

LIMIT = 1 << 22
"""Bytes a saved plan may hold: a group of many members stays far below."""


def _read(path: str) -> bytes:
    from exedra_engine._shell.local.files import read_regular

    try:
        data = read_regular(path, LIMIT)  # a FIFO named like the plan would hang the command
    except OSError as e:
        raise PlanError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(data) > LIMIT:
        raise PlanError(f"{path}: larger than {LIMIT} bytes: not a saved plan")
    return data


def _is_group(data: bytes) -> bool:
    """Whether `data` is a JSON object with a field of `GroupPlan` that `LaunchPlan` lacks
    (``plans``, ``shares``...): read from the two types, so it follows them."""
    try:
        head = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return False
    if not isinstance(head, dict):
        return False
    group = {f.encode_name for f in msgspec.structs.fields(GroupPlan)}
    single = {f.encode_name for f in msgspec.structs.fields(LaunchPlan)}
    return bool(head.keys() & (group - single))


def _decoded(path: str, data: bytes, kind: type[LaunchPlan] | type[GroupPlan]) -> object:
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.ValidationError as e:
        what, sep, at = str(e).rpartition(" - at ")
        raise PlanError(f"{path}: {at.strip('`')}: {what}" if sep else f"{path}: {e}") from None
    except msgspec.DecodeError as e:
        raise PlanError(f"{path}: not JSON ({e})") from None
    except PlanError as e:  # the value's own check (`GroupPlan`: one share per plan)
        raise PlanError(f"{path}: {e}") from None


def load_saved(path: str) -> LaunchPlan | GroupPlan:
    """The plan saved in `path` (``plan --json`` or ``plan --group --json``), decoded
    strictly; the `PlanError` names the file and the field."""
    data = _read(path)
    if _is_group(data):
        group = _decoded(path, data, GroupPlan)
        assert isinstance(group, GroupPlan)
        return _checked_group(path, group)
    plan = _decoded(path, data, LaunchPlan)
    assert isinstance(plan, LaunchPlan)
    return plan


def saved_group(path: str) -> GroupPlan | None:
    """The group plan saved in `path` (``plan --group --json``), or None when the file is
    no saved group plan (a group file, which the group planner reads and reports on)."""
    try:
        data = _read(path)
    except PlanError:
        return None  # the group file's reader says why it cannot be read
    if not _is_group(data):
        return None
    group = _decoded(path, data, GroupPlan)
    assert isinstance(group, GroupPlan)
    return _checked_group(path, group)


def _checked_group(path: str, group: GroupPlan) -> GroupPlan:
    """`group`, refused when its parts do not belong together (an edit that dropped a
    member's plan or share): one plan and one share per member, ids unique and the same."""
    if len(group.plans) != len(group.shares):
        raise PlanError(
            f"{path}: {len(group.plans)} plans but {len(group.shares)} shares: a saved group "
            "plan has one of each per member"
        )
    if len(set(group.ids)) != len(group.ids):
        raise PlanError(f"{path}: shares: member ids repeat ({', '.join(group.ids)})")
    for i, (share, plan) in enumerate(zip(group.shares, group.plans, strict=True)):
        if plan.spec.id != share.id:
            raise PlanError(
                f"{path}: plans[{i}]: its model id {plan.spec.id!r} is not its share's "
                f"{share.id!r}: the plans and shares are in member order"
            )
    return group


_PLANNING = (
    ("config", "--config"),
    ("host", "--host"),
    ("port_base", "--port-base"),
    ("no_gpu", "--no-gpu"),
    ("ui", "--ui"),
    ("api_key_env", "--api-key-env"),
    ("arg", "--arg"),
    ("env", "--env"),
    ("hardware", "--hardware"),
)
"""Options that shape a plan: a saved group plan was planned already, so they are refused
with one rather than ignored."""


def refuse_replanning(a: argparse.Namespace, path: str) -> None:
    """`EngineError` (exit 2) naming the options given that would plan again."""
    unset: tuple[object, ...] = (None, False, [], "", 0)
    given = [flag for dest, flag in _PLANNING if getattr(a, dest, None) not in unset]
    if given:
        raise EngineError(
            f"{', '.join(given)} do{'es' * (len(given) == 1)} not go with a saved group plan "
            f"({path}): it is launched as saved; plan the group file again with them "
            "(plan --group FILE ... --json)"
        )


def keyed_again(group: GroupPlan, path: str, environ: Mapping[str, str]) -> GroupPlan:
    """`group` with each member's API key read again from the variable its plan names
    (`LaunchPlan.key_env`): a saved plan holds the redaction marker where the key stood,
    never the key. `PlanError` naming the member and the variable when it is unset."""
    plans: list[LaunchPlan] = []
    for plan in group.plans:
        words = (plan.api_key, *plan.args, *plan.env)
        if not any(REDACTED in w for w in words):
            plans.append(plan)
            continue
        key = environ.get(plan.key_env, "") if plan.key_env else ""
        if not key:
            where = (
                f"set {plan.key_env}, which its plan reads it from"
                if plan.key_env
                else "its plan names no variable to read it from: plan with --api-key-env VAR"
            )
            raise PlanError(
                f"{path}: member {plan.spec.id}: its API key was redacted when the plan was "
                f"saved, and launch reads it again: {where}"
            )
        plans.append(
            msgspec.structs.replace(
                plan,
                api_key=plan.api_key.replace(REDACTED, key),
                args=tuple(w.replace(REDACTED, key) for w in plan.args),
                env=tuple(w.replace(REDACTED, key) for w in plan.env),
            )
        )
    return msgspec.structs.replace(group, plans=tuple(plans))
