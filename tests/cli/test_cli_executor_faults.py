"""Each command that launches (``launch``, ``demo``) against each executor fault: one line
of error (then the executor's last log lines, indented), exit 1 or 2, never a traceback or
an ExceptionGroup. And one shape of Ctrl-C during a load for every adapter: a plain
`KeyboardInterrupt`."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

import exedra_engine as engine
from exedra_engine import aio
from exedra_engine.testing import free_port
from tests.adapters.test_conformance import fake
from tests.conftest import FAKE

__all__ = ["fake"]  # a fixture, used by name

FAULTS = ["sigill", "die", "hang", "refuse"]


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fake executor as the ``llama-server`` found first on PATH (the demo looks there)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "llama-server").symlink_to(FAKE)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir / "llama-server"


def _one_error(code: int, err: str) -> None:
    assert code in (1, 2), (code, err)
    assert "Traceback" not in err and "ExceptionGroup" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("exedra-engine: error:")]
    assert len(errors) == 1, err
    # What follows the error line is its log tail, indented, and nothing else.
    after = err[err.index(errors[0]) :].splitlines()[1:]
    assert not after or after[0] == "last log lines of the executor:", err
    assert all(line.startswith("  ") for line in after[1:]), err


@pytest.mark.parametrize("mode", FAULTS)
def test_launch_fails_in_one_line_on_each_executor_fault(
    mode: str,
    tiny_llama: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from exedra_engine.cli import main

    monkeypatch.setenv("FAKE_MODE", mode)
    argv = ["launch", "--model", str(tiny_llama), "--kind", "llama", "--no-config"]
    port = str(free_port())  # its own: a stranger's 200 on a scanned port would make it ready
    code = main([*argv, "--executor", str(FAKE), "--ready-timeout", "1", "--quiet", "--port", port])
    _one_error(code, capsys.readouterr().err)


@pytest.mark.parametrize("mode", FAULTS)
def test_demo_fails_in_one_line_on_each_executor_fault(
    mode: str,
    on_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from exedra_engine.cli import main
    from exedra_engine.cli.demo import demo_run

    monkeypatch.setenv("FAKE_MODE", mode)
    monkeypatch.setattr(demo_run, "READY_TIMEOUT", 1.0)
    code = main(["demo"])
    _one_error(code, capsys.readouterr().err)


# -- Ctrl-C during a load ----------------------------------------------------------------------


def _trio(plan: engine.LaunchPlan) -> None:
    async def main() -> None:
        async with engine.open_instance(plan):
            pass

    trio.run(main)


def _trio_launch(plan: engine.LaunchPlan) -> None:
    # What `launch` itself raises: the caller's own nursery then wraps it, as trio does.
    raised: list[BaseException] = []

    async def main() -> None:
        async with trio.open_nursery() as n:
            try:
                await engine.launch(n, plan)
            except BaseException as e:
                raised.append(e)

    trio.run(main)
    raise raised[0]


def _asyncio(plan: engine.LaunchPlan) -> None:
    async def main() -> None:
        async with aio.open_instance(plan):
            pass

    asyncio.run(main())


def _blocking(plan: engine.LaunchPlan) -> None:
    with engine.run(plan):
        pass


@pytest.fixture
def ctrl_c_soon() -> Iterator[Callable[[float], None]]:
    timers: list[threading.Timer] = []

    def after(seconds: float) -> None:
        main = threading.main_thread().ident or 0
        timer = threading.Timer(seconds, signal.pthread_kill, (main, signal.SIGINT))
        timers.append(timer)
        timer.start()

    yield after
    for t in timers:
        t.cancel()


@pytest.mark.parametrize(
    "start", [_trio, _trio_launch, _asyncio, _blocking], ids=lambda f: f.__name__.strip("_")
)
def test_ctrl_c_during_a_load_is_a_plain_keyboard_interrupt(
    start: Callable[[engine.LaunchPlan], None],
    fake: Callable[..., engine.LaunchPlan],
    ctrl_c_soon: Callable[[float], None],
) -> None:
    assert threading.current_thread() is threading.main_thread()
    plan = fake("hang")
    ctrl_c_soon(0.5)
    with pytest.raises(BaseException) as caught:  # its exact type is the point
        start(plan)
    assert type(caught.value) is KeyboardInterrupt, repr(caught.value)
