"""The boundary: an entry point written once, in its raising form, and its Result form made
by `boundary` (returns' ``@safe``, narrowed to `EngineError`)."""

from __future__ import annotations

import inspect

import pytest
from returns.result import Failure, Success

import exedra_engine as engine
from exedra_engine._core.config.parse import located_config, located_config_from_yaml, parse_config
from exedra_engine._core.emit import emit, emit_files
from exedra_engine._core.gguf.header import parse_gguf_header, read_gguf_header
from exedra_engine._core.gguf.inventory_reader import parse_gguf_inventory, read_gguf_inventory
from exedra_engine._core.group.planner import explain_members, plan_members
from exedra_engine._core.outcome import boundary
from exedra_engine._core.plan.endpoint import resolve
from exedra_engine._core.plan.planner import explain_plan, make_plan
from exedra_engine._shell.config_check import check_config, judge_config
from exedra_engine._shell.group_plan import read_group
from exedra_engine._shell.hardware_file import load_hardware, read_hardware
from exedra_engine._shell.inspect import inventory_at, read_model
from exedra_engine._shell.load_config import read_config
from exedra_engine._shell.probe import host_hardware
from exedra_engine.errors import ConfigError, EngineError


def _halve(n: int, *, why: str = "odd") -> int:
    """Half of `n`; `ConfigError` for an odd one, `ValueError` for a negative one."""
    if n < 0:
        raise ValueError(n)
    if n % 2:
        raise ConfigError(why)
    return n // 2


def test_the_result_form_holds_the_value_or_the_engine_error() -> None:
    halve = boundary(_halve)
    assert halve(4) == Success(2)
    failed = halve(3, why="three")
    assert isinstance(failed, Failure)
    assert isinstance(failed.failure(), ConfigError) and str(failed.failure()) == "three"


def test_an_error_that_is_no_engine_error_propagates() -> None:
    with pytest.raises(ValueError, match="-2"):
        boundary(_halve)(-2)


def test_the_result_form_keeps_the_signature_and_docstring() -> None:
    halve = boundary(_halve)
    assert inspect.signature(halve) == inspect.signature(_halve)
    assert halve.__doc__ == _halve.__doc__


@pytest.mark.parametrize(
    ("public", "raising"),
    [
        (engine.plan_launch, make_plan),
        (engine.explain_launch, explain_plan),
        (engine.plan_group, plan_members),
        (engine.explain_group, explain_members),
        (engine.load_config, read_config),
        (engine.load_group, read_group),
        (engine.config_from_yaml, parse_config),
        (located_config_from_yaml, located_config),
        (engine.inspect, read_model),
        (engine.read_inventory, inventory_at),
        (engine.probe, host_hardware),
        (engine.resolve_endpoint, resolve),
        (load_hardware, read_hardware),
        (check_config, judge_config),
        (parse_gguf_header, read_gguf_header),
        (parse_gguf_inventory, read_gguf_inventory),
        (emit, emit_files),
    ],
    ids=lambda f: getattr(f, "__name__", ""),
)
def test_each_public_entry_point_is_its_raising_form_at_the_boundary(
    public: object, raising: object
) -> None:
    # One signature per entry point: the public Result form is made, not written again.
    assert getattr(public, "__wrapped__", None) is raising


def test_a_failing_public_entry_point_returns_its_error() -> None:
    result = engine.load_group("/nonexistent/group.yaml")
    assert isinstance(result, Failure) and isinstance(result.failure(), EngineError)
