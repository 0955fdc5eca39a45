"""How an executor process is set up, as a value an adapter's spawner carries out. Pure.

Chosen so that nothing is left behind:

- The child runs in its own session and process group, so a stop signals every process it
  forked, and a terminal's Ctrl-C reaches the caller only (which then stops the group).
- The kernel sends it `death_signal` when the thread that started it dies
  (``PR_SET_PDEATHSIG``), so ``kill -9`` of the caller leaves no executor holding memory or
  a port.
- Its environment is the plan's (`exedra_engine._core.launch.environ`), with stdin closed and
  stdout and stderr on one pipe.
"""

from __future__ import annotations

from collections.abc import Mapping

from exedra_engine._core.executors.builtin import BUILTIN
from exedra_engine._core.executors.profile import Executors
from exedra_engine._core.launch.environ import child_environment
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.struct import Value


class ChildSpec(Value, frozen=True, kw_only=True):
    """What to start and how."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    """Name-value pairs (a value, so it stays hashable and immutable)."""
    new_session: bool = True
    death_signal: str = "SIGKILL"
    """Sent by the kernel when the starting thread dies ("": none)."""


def child_spec(
    plan: LaunchPlan, base_env: Mapping[str, str], *, executors: Executors = BUILTIN
) -> ChildSpec:
    """The set-up of `plan`'s executor, its environment built on `base_env`."""
    env = child_environment(plan, base_env, executors=executors)
    return ChildSpec(argv=(plan.command, *plan.args), env=tuple(env.items()))
