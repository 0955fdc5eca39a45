"""exedra-engine: plan and launch local AI model executors as subprocesses.

The planner is a pure function of its inputs; the effects (probing the host, reading a
model header, starting and stopping a process) sit behind small ports with a trio adapter::

    hw = engine.probe().unwrap()
    spec = engine.ModelSpec(id="qwen", path="/models/qwen.gguf", kind=engine.Kind.LLAMA)
    plan = engine.plan(spec, hw, engine.Constraints(api_key="secret")).unwrap()
    async with engine.open_instance(plan) as inst:
        print(inst.endpoint.url)

Importing this package imports neither trio, numpy nor gguf: the launcher is loaded on
first use of `launch`, `open_instance` or `Instance`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from exedra_engine._core.config.overrides import Config, Override
from exedra_engine._core.config.parse import config_from_yaml, merge_configs
from exedra_engine._core.executors.builtin import BUILTIN as BUILTIN_EXECUTORS
from exedra_engine._core.executors.builtin import executor_profile
from exedra_engine._core.executors.kinds import Kind, KindName, parse_kind, supported_kinds
from exedra_engine._core.executors.profile import ExecutorProfile, Executors
from exedra_engine._core.gguf.inventory import ModelInventory, TensorInfo
from exedra_engine._core.host.hardware import HostSnapshot, hardware_from
from exedra_engine._core.memory.plan import MemoryParts, MemoryPlan, PlaceMemory
from exedra_engine._core.plan.endpoint import Resolved, resolve_endpoint
from exedra_engine._core.plan.explained import Explained
from exedra_engine._core.plan.launch_plan import LaunchPlan
from exedra_engine._core.plan.planner import explain_launch, plan_launch
from exedra_engine._core.values import (
    CPU,
    GPU,
    Constraints,
    Device,
    Endpoint,
    ExecutorInfo,
    Hardware,
    ModelInfo,
    ModelSpec,
)
from exedra_engine._shell.inspect import inspect, read_inventory
from exedra_engine._shell.load_config import load_config
from exedra_engine._shell.plan import plan, plan_explained
from exedra_engine._shell.probe import probe
from exedra_engine._version import __version__
from exedra_engine.constants import (
    DEFAULT_CONFIG_PATH,
    DEFAULT_HOST,
    DEFAULT_PORT_BASE,
    STOP_TIMEOUT,
)
from exedra_engine.errors import (
    AddressUnavailable,
    ArgumentRefused,
    ConfigError,
    DoesNotFit,
    EmitError,
    EngineError,
    ExecutorNotFound,
    ExitedUnexplained,
    HardwareFileError,
    IllegalInstruction,
    KilledBySignal,
    LaunchError,
    LibraryNotLoaded,
    LoadStalled,
    MemberFailed,
    ModelNotLoaded,
    ModelUnreadable,
    NoEndpoint,
    NoHardware,
    NotGGUF,
    NotReady,
    OutOfMemory,
    PlanError,
    PortInUse,
    ReadyTimeout,
    UnsupportedKind,
)

if TYPE_CHECKING:
    from exedra_engine._blocking.group import run_group
    from exedra_engine._blocking.run import run
    from exedra_engine._core.config.findings import Finding
    from exedra_engine._core.config.schema import config_schema
    from exedra_engine._core.emit import EmitOptions, Emitted, Selinux, Storage, Target, emit
    from exedra_engine._core.group.planner import GroupExplained, explain_group, plan_group
    from exedra_engine._core.group.start import Group
    from exedra_engine._core.group.values import GroupMember, GroupPlan, MemberFacts, MemberShare
    from exedra_engine._shell.config_check import CheckReport, check_config
    from exedra_engine._shell.group_plan import load_group, plan_group_on_host
    from exedra_engine._shell.hardware_file import load_hardware
    from exedra_engine._trio.group import open_group
    from exedra_engine._trio.launcher import ExitReason, Instance, launch, open_instance

__all__ = [
    "CheckReport",
    "EmitOptions",
    "Emitted",
    "Finding",
    "Selinux",
    "Storage",
    "Target",
    "check_config",
    "config_schema",
    "emit",
    "load_hardware",
    "ExecutorProfile",
    "executor_profile",
    "CPU",
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_HOST",
    "DEFAULT_PORT_BASE",
    "GPU",
    "STOP_TIMEOUT",
    "Config",
    "ConfigError",
    "Constraints",
    "Device",
    "Endpoint",
    "EngineError",
    "ExitReason",
    "ExecutorInfo",
    "ExecutorNotFound",
    "Explained",
    "Hardware",
    "HostSnapshot",
    "Instance",
    "Kind",
    "LaunchError",
    "LaunchPlan",
    "ModelInfo",
    "ModelSpec",
    "ModelUnreadable",
    "NoEndpoint",
    "NoHardware",
    "NotGGUF",
    "NotReady",
    "Override",
    "PlanError",
    "PortInUse",
    "Resolved",
    "UnsupportedKind",
    "DoesNotFit",
    "MemoryParts",
    "MemoryPlan",
    "PlaceMemory",
    "__version__",
    "config_from_yaml",
    "explain_launch",
    "hardware_from",
    "inspect",
    "launch",
    "load_config",
    "merge_configs",
    "open_instance",
    "parse_kind",
    "plan",
    "plan_explained",
    "plan_launch",
    "probe",
    "resolve_endpoint",
    "supported_kinds",
    "run",
    "AddressUnavailable",
    "ArgumentRefused",
    "ExitedUnexplained",
    "IllegalInstruction",
    "KilledBySignal",
    "LibraryNotLoaded",
    "LoadStalled",
    "ModelNotLoaded",
    "OutOfMemory",
    "ReadyTimeout",
    "EmitError",
    "HardwareFileError",
    "Executors",
    "BUILTIN_EXECUTORS",
    "KindName",
    "Group",
    "MemberFailed",
    "open_group",
    "run_group",
    "GroupExplained",
    "GroupMember",
    "GroupPlan",
    "MemberFacts",
    "MemberShare",
    "ModelInventory",
    "TensorInfo",
    "explain_group",
    "load_group",
    "plan_group",
    "plan_group_on_host",
    "read_inventory",
]

# Loaded on first use, so that planning-only users never pay for them: the launcher needs trio
# (~120-140 ms to import), the emitter and the checker only matter when asked for.
_LAZY = {
    **dict.fromkeys(("ExitReason", "Instance", "launch", "open_instance"), "_trio.launcher"),
    **dict.fromkeys(
        ("EmitOptions", "Emitted", "Selinux", "Storage", "Target", "emit"), "_core.emit"
    ),
    "Finding": "_core.config.findings",
    "config_schema": "_core.config.schema",
    "CheckReport": "_shell.config_check",
    "check_config": "_shell.config_check",
    "load_hardware": "_shell.hardware_file",
    # The blocking adapter (asyncio on a private thread; no trio).
    "run": "_blocking.run",
    # Several executors at once (issue 29): each adapter's group launcher.
    "open_group": "_trio.group",
    "run_group": "_blocking.group",
    "Group": "_core.group.start",
    # Planning a group: not paid by a single plan (the command line's cold ``plan``).
    **dict.fromkeys(("GroupExplained", "explain_group", "plan_group"), "_core.group.planner"),
    **dict.fromkeys(
        ("GroupMember", "GroupPlan", "MemberFacts", "MemberShare"), "_core.group.values"
    ),
    **dict.fromkeys(("load_group", "plan_group_on_host"), "_shell.group_plan"),
}


if not TYPE_CHECKING:
    # Hidden from type checkers, which see the imports above: a typo in an attribute name
    # must stay a type error, not become Any.
    def __getattr__(name: str) -> object:
        if name in _LAZY:
            import importlib

            value = getattr(importlib.import_module(f"exedra_engine.{_LAZY[name]}"), name)
            globals()[name] = value
            return value
        raise AttributeError(f"module 'exedra_engine' has no attribute {name!r}")
