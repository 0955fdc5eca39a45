"""Shared fixtures: generated models, fixture hosts, the real executors."""

from __future__ import annotations

import contextlib
import io
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import msgspec
import pytest

from exedra_engine import CPU, ExecutorInfo, Hardware, Kind
from exedra_engine._shell.local.host import LocalHost
from exedra_engine._shell.probe import probe
from exedra_engine.testing import (
    find_executor,
    real_model_path,
    write_tiny_llama,
    write_tiny_whisper,
    write_wav,
)


@pytest.fixture(autouse=True)
def _ctrl_c_as_at_a_terminal() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt in every test, as it does for a user at a terminal.
    A suite started in the background by a non-interactive shell (``cmd &``) inherits SIGINT
    ignored, and Python then keeps it ignored: the tests of what Ctrl-C does would wait for
    an interrupt that can never come."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


ROOT = Path(__file__).resolve().parent.parent
HOSTS = Path(__file__).resolve().parent / "fixtures" / "hosts"


def _open_to_all(path: Path) -> bool:
    """Whether a unit's other user could walk to `path`: not under /tmp or /var/tmp (which
    PrivateTmp= hides), and every directory on the way that exists searchable by others."""
    if path.parts[1:2] == ("tmp",) or path.parts[1:3] == ("var", "tmp"):
        return False
    return all(not p.is_dir() or p.stat().st_mode & 0o001 for p in (path, *path.parents))


def outside_tmp(name: str) -> Path:
    """A path for a new directory that a systemd unit's DynamicUser= could reach: the
    checkout's .cache where the checkout is such a place (a clone under /tmp is not), else
    /var/lib/exedra-engine-tests (CI runs as root). The caller creates and removes it."""
    for base in (ROOT / ".cache", Path("/var/lib/exedra-engine-tests")):
        if _open_to_all(base):
            return base / name
    raise AssertionError(f"no directory a unit's user can reach for the test ({ROOT})")


FAKE = Path(__file__).resolve().parent / "fake_executor.py"


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def tiny_llama(models: Path) -> Path:
    return write_tiny_llama(models / "tiny.gguf")


@pytest.fixture(scope="session")
def tiny_whisper(models: Path) -> Path:
    return write_tiny_whisper(models / "tiny-whisper.bin")


@pytest.fixture(scope="session")
def wav(models: Path) -> Path:
    return write_wav(models / "tone.wav", seconds=1.0)


def host(name: str, path: str = "/usr/local/bin:/usr/bin", affinity: int = 8) -> LocalHost:
    """A LocalHost rooted at one of the fixture trees."""
    return LocalHost(str(HOSTS / name), path_env=path, affinity=affinity)


def hardware_file(tmp_path: Path, tree: str = "nvidia") -> Path:
    """The probe of fixture tree TREE, written under TMP_PATH as `probe --json` writes it."""
    f = tmp_path / f"{tree}.json"
    f.write_bytes(msgspec.json.encode(probe(host(tree)).unwrap()))
    return f


def eight_threads(llama: str = "/usr/bin/llama-server") -> Hardware:
    """A host of 8 threads and 16 GiB without a GPU: llama-server at LLAMA, whisper-server in
    /usr/bin (paths only: nothing is run)."""
    return Hardware(
        cpu=CPU(threads=8, ram=1 << 34),
        executors=(
            ExecutorInfo(kind=Kind.LLAMA, path=llama),
            ExecutorInfo(kind=Kind.TRANSCRIBE, path="/usr/bin/whisper-server"),
        ),
    )


def _executor(name: str) -> str:
    """The real executor binary; its absence is a failure, never a skip (see ./dev test).

    ./dev puts the directory that scripts/install-executors.sh printed first on PATH and in
    EXEDRA_EXECUTORS_BIN (the builds live in the user cache, ~/.cache/exedra-engine/executors).
    """
    found = find_executor(name)
    if found is None:
        pytest.fail(
            f"{name} is not installed: run ./dev test (or scripts/install-executors.sh)",
            pytrace=False,
        )
    return str(found)


def _real_model() -> Path:
    """Gemma 3 270M Q4_K_M from the user cache (scripts/fetch_model.py); missing is a failure."""
    path = real_model_path()
    if not path.is_file():
        pytest.fail(
            f"the real model {path} is missing: run ./dev test (or scripts/fetch_model.py)",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def real_model() -> Path:
    """Gemma 3 270M Q4_K_M (241 MiB), which takes seconds to load: a real load time."""
    return _real_model()


@pytest.fixture(scope="session")
def llama_server() -> str:
    return _executor("llama-server")


@pytest.fixture(scope="session")
def fit_params() -> str:
    """llama-fit-params, built beside llama-server (scripts/install-executors.sh)."""
    return _executor("llama-fit-params")


VULKAN_ENV = {"GGML_VK_VISIBLE_DEVICES": "0"}
"""lavapipe is a CPU device, which ggml's Vulkan backend lists only when asked for it."""


@pytest.fixture(scope="session")
def vulkan_llama_server() -> str:
    """A llama-server with the Vulkan backend that sees lavapipe as Vulkan0 (2048 MiB):
    ./dev test installs both (scripts/install-executors.sh vulkan) and names the binary in
    EXEDRA_VULKAN_LLAMA_SERVER. Missing, or not seeing the device, is a failure, never a skip:
    the GPU path is tested for real on every machine."""
    import os
    import subprocess

    path = os.environ.get("EXEDRA_VULKAN_LLAMA_SERVER", "")
    if not path or not os.access(path, os.X_OK):
        pytest.fail(
            f"no Vulkan llama-server (EXEDRA_VULKAN_LLAMA_SERVER={path!r}): run ./dev test "
            "(or scripts/install-executors.sh vulkan)",
            pytrace=False,
        )
    r = subprocess.run([path, "--list-devices"], env={**os.environ, **VULKAN_ENV},
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    if "Vulkan0: llvmpipe" not in r.stdout:
        pytest.fail(
            f"{path} --list-devices does not list lavapipe as Vulkan0 (apt-get install "
            f"mesa-vulkan-drivers): {r.stdout.strip()[-300:]!r}",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def whisper_server() -> str:
    return _executor("whisper-server")


@pytest.fixture(scope="session")
def real_hw(llama_server: str, whisper_server: str) -> Hardware:
    """This host, with the real executors (from the project cache if not on PATH)."""
    hw = probe().unwrap()
    return Hardware(
        cpu=hw.cpu,
        gpus=hw.gpus,
        executors=(
            ExecutorInfo(kind=Kind.LLAMA, path=llama_server),
            ExecutorInfo(kind=Kind.TRANSCRIBE, path=whisper_server),
        ),
    )


@pytest.fixture(scope="session")
def fake_hw() -> Hardware:
    """A CPU-only host whose llama executor is the fake one (tests/fake_executor.py)."""
    return Hardware(
        cpu=probe().unwrap().cpu, executors=(ExecutorInfo(kind=Kind.LLAMA, path=str(FAKE)),)
    )


class Ran(NamedTuple):
    """What `exedra-engine ARGS` did in this process."""

    returncode: int
    stdout: str
    stderr: str

    @property
    def code(self) -> int:
        return self.returncode

    @property
    def out(self) -> str:
        return self.stdout

    @property
    def err(self) -> str:
        return self.stderr


Run = Callable[..., Ran]


def cli(*args: str) -> Ran:
    """`exedra-engine ARGS` in this process: `main(argv)`, its exit code and what it printed.
    `main` returns for argparse's exits too (--help, usage errors), so nothing is caught here:
    an exception is the CLI's bug and fails the test with its traceback."""
    from exedra_engine.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return Ran(code, out.getvalue(), err.getvalue())


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch) -> Run:
    """`cli`, with `env` set for the rest of the test. Tests that need a real process (the
    entry points, signals, a closed or full stdout) start one themselves."""

    def go(*args: str, env: dict[str, str] | None = None) -> Ran:
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        return cli(*args)

    return go
