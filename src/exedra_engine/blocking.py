"""Launching from blocking code: a script, a REPL, or a worker thread of an application.

``with run(plan) as inst:`` blocks until the executor is ready and stops it when the block
ends, also on an exception or Ctrl-C; it installs no signal handler, so it works from any
thread. The same guarantees as `exedra_engine.aio` (which it runs on a private loop)::

    import exedra_engine as engine

    with engine.run(plan) as inst:
        print(inst.endpoint.url)
"""

from __future__ import annotations

from exedra_engine._blocking.group import Group, RunningGroup, run_group
from exedra_engine._blocking.run import Instance, Running, run

__all__ = ["Group", "Instance", "Running", "RunningGroup", "run", "run_group"]
