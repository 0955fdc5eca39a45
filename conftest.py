"""The suite's two phases: `just test` runs the tests marked `serial` alone, the rest on every core.

A test is serial when it starts a process that serves or measures (a real or fake executor, the
CLI's launch or demo, llama-fit-params, a `--help` of the real binary), sends signals, binds ports,
or times itself: run side by side, such a test could see another's port, process or CPU load and
fail by chance. Everything else (pure planning, parsing, emitting, property tests without clocks)
runs under pytest-xdist. A module is serial as a whole when it is listed below; any test using a
real-executor fixture or marked `executor` is serial wherever it lives.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

# Modules that launch processes, send signals, bind ports or measure time (by file stem).
SERIAL_MODULES = frozenset(
    {
        "test_adapters",
        "test_bench",
        "test_binary_probes_bounded",
        "test_build_buffers",
        "test_cli",
        "test_cli_executor_faults",
        "test_conformance",
        "test_docs",
        "test_emit",
        "test_escaped_processes",
        "test_example_fastapi",
        "test_exit_diagnosis",
        "test_fault_drills",
        "test_group_cli",
        "test_group_launch",
        "test_hostile_headers",
        "test_hostile_input",
        "test_hostile_paths",
        "test_exit_statuses",
        "test_first_use",
        "test_signals_in_every_phase",
        "test_launch",
        "test_launch_failures_cli",
        "test_lifecycle",
        "test_live_flags",
        "test_measure",
        "test_memory",
        "test_memory_planner",
        "test_plan_findings",
        "test_planning_shell",
        "test_portability",
        "test_profiles",
        "test_readiness",
        "test_real_model",
        "test_secret_leaks",
        "test_secret_routes",
        "test_sock_diag",
        "test_stop_policy",
        "test_wait_ready_url",
        "test_endpoint_props",
        "test_hostile_input_props",
        "test_inventory_props",
        "test_planner_props",
        "test_secret_echo_props",
    }
)
# Fixtures that hand a test a real executor (tests/conftest.py).
SERIAL_FIXTURES = frozenset(
    {"llama_server", "whisper_server", "fit_params", "real_hw", "vulkan_llama_server"}
)


def is_serial(item: pytest.Item) -> bool:
    """Whether ITEM must run in the serial phase."""
    stem = item.path.stem if item.path is not None else ""
    fixtures = set(getattr(item, "fixturenames", ()))
    return (
        stem in SERIAL_MODULES
        or bool(fixtures & SERIAL_FIXTURES)
        or item.get_closest_marker("executor") is not None
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if is_serial(item):
            item.add_marker(pytest.mark.serial)


_STATE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    # `launch` keeps the executor's log under $XDG_STATE_HOME (cli/launch/launch_output.py): the
    # suite's launches keep theirs in a directory of their own, not in the user's.
    _STATE.append(tempfile.mkdtemp(prefix="exedra-test-state-"))
    os.environ["XDG_STATE_HOME"] = _STATE[-1]


def pytest_unconfigure(config: pytest.Config) -> None:
    while _STATE:
        shutil.rmtree(_STATE.pop(), ignore_errors=True)
