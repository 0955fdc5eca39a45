"""Defaults shared by the planner, the launcher and the command line."""

from __future__ import annotations

from typing import Final

DEFAULT_HOST: Final = "127.0.0.1"
"""Bind address used when `Constraints.host` is empty."""

DEFAULT_PORT_BASE: Final = 18080
"""First port tried when `Constraints.port` is 0."""

STOP_TIMEOUT: Final = 10.0
"""SIGTERM grace period, in seconds, before `Instance.stop` sends SIGKILL."""


def _packaged_config_path() -> str:
    # A wheel built with EXEDRA_ENGINE_CONFIG_PATH set carries _sysconf.py (see hatch_build.py);
    # a source checkout does not.
    try:
        from exedra_engine._sysconf import CONFIG_PATH  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return "/etc/exedra/engine.d"
    return str(CONFIG_PATH)


DEFAULT_CONFIG_PATH: Final = _packaged_config_path()
"""System-wide override directory. Packagers set it at build time with
``EXEDRA_ENGINE_CONFIG_PATH=/their/sysconfdir/exedra/engine.d python -m build``."""

INSTALL_HINT: Final = "build it with scripts/install-executors.sh (in a clone of exedra-engine)"
"""What installs a missing executor, said wherever one is missing; the library and the CLI
also look in the directory that script fills (`exedra_engine._shell.local.executor_cache`)."""

MAX_THREADS: Final = 512
"""The most CPU threads a plan may ask for (`Constraints.threads`, a ``--threads`` in the
layers): ggml's ``GGML_MAX_N_THREADS``, the most threads its CPU masks can place. llama-server
starts with somewhat more, but aborts with ``std::bad_alloc`` far above it (``--threads
100000``), after the plan was accepted."""

MAX_GROUP_MEMBERS: Final = 256
"""The most members a group may have. Each member is an executor on one host, planned and
started with its own port, CPUs and memory share; a file with thousands is a mistake (or
hostile), and refusing it up front keeps planning cost bounded."""
