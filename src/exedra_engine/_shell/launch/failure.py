"""Why a start did not become ready, as the typed `NotReady` it raises: a timeout or a
stall as it stands, an exit classified by the profile's patterns
(`exedra_engine._core.launch.diagnosis`) once the log has been read to its end."""

from __future__ import annotations

import functools
from typing import Any, Literal

from exedra_engine._core.launch import diagnosis
from exedra_engine._core.launch.readiness import LoadLimits
from exedra_engine._shell.launch.child import signal_name
from exedra_engine._shell.launch.instance import InstanceState
from exedra_engine._shell.launch.loop import Loop
from exedra_engine._shell.launch.options import LaunchOptions
from exedra_engine._shell.launch.ready import Outcome
from exedra_engine._shell.local.flag_tables import suggest_flag
from exedra_engine.errors import NotReady

LOG_DRAIN = 1.0
"""How long an exit's last lines may take to come through the pipe before it is judged."""


async def not_ready(
    inst: InstanceState[Any, Any],
    outcome: Outcome,
    limits: LoadLimits,
    opts: LaunchOptions[Any],
    loop: Loop,
) -> NotReady:
    """The typed failure of a start that did not become ready (`inst` is dead by now). A
    refused flag is named with its layer (``opts.sources``) and the installed binary's
    closest flag, looked up on a thread."""
    plan, reason, url = inst.plan, inst.exit_reason, inst.endpoint.url
    if outcome != "exited" or reason is None:
        kind: Literal["timeout", "stalled"] = "stalled" if outcome == "stalled" else "timeout"
        seconds = limits.stall if kind == "stalled" else limits.budget
        return diagnosis.not_answering(
            kind,
            command=plan.command,
            path=plan.ready,
            url=url,
            seconds=seconds,
            log=inst.log_tail,
        )
    await inst.output_ended_within(LOG_DRAIN)
    sig = reason.signal
    r = inst.resolved  # read once, at the start
    ended = diagnosis.Exit(
        command=plan.command,
        returncode=reason.returncode,
        how=reason.describe(),
        signal=signal_name(sig) if sig else "",
        log=inst.log_tail,
        host=r.host,
        port=r.port,
    )
    profile = inst.profile
    # On a worker thread: a refused flag's did-you-mean reads the installed binary's table.
    suggest = functools.partial(suggest_flag, profile, plan.command)
    classify = functools.partial(
        diagnosis.classify, ended, profile, suggest, sources=opts.sources, memory=plan.memory
    )
    return await loop.in_thread(classify)
