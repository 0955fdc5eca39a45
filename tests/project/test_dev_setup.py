"""The set-up a newcomer runs: `./dev` alone prints its commands, the demo's executor build
picks this CPU's ggml variant (scripts/install-executors.sh), and the suite's two phases
(scripts/test-phases.sh, conftest.py)."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-executors.sh"


def test_dev_alone_prints_its_commands_and_sets_nothing_up(tmp_path: Path) -> None:
    for argv in (["./dev"], ["./dev", "help"], ["./dev", "--help"]):
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=30, check=False,
                           env={**os.environ, "PYTHON": str(tmp_path / "no-python")})  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("usage: ./dev COMMAND")
        for command in ("demo", "test", "test-quick", "executors", "bench", "soak", "help"):
            assert f"\n  {command} " in r.stdout, command
        assert r.stderr == ""  # no venv made, no pip run (PYTHON points nowhere)


def _this_cpu(variants: str, flags: str) -> str:
    # The script's two functions alone, sourced: nothing is built.
    text = SCRIPT.read_text()
    funcs = [text[text.index(f"{name}() {{") :].split("\n}\n", 1)[0] + "\n}\n"
             for name in ("variant_features", "this_cpu")]  # fmt: skip
    r = subprocess.run(["bash", "-c", "".join(funcs) + 'this_cpu "$1" "$2"', "-", variants, flags],
                       capture_output=True, text=True, check=True, timeout=30)  # fmt: skip
    return r.stdout.strip()


LLAMA = "x64 sse42 sandybridge haswell alderlake skylakex icelake"
WHISPER = "x64 sse42 sandybridge haswell skylakex"
HASWELL = "sse4_2 avx f16c fma avx2 bmi2"
AVX512 = "avx512f avx512cd avx512vl avx512dq avx512bw"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the x86 variants' table")
@pytest.mark.parametrize(
    ("flags", "llama", "whisper"),
    [
        ("fpu sse2", "x64", "x64"),
        ("sse2 sse4_2", "x64 sse42", "x64 sse42"),
        ("sse4_2 avx", "x64 sandybridge", "x64 sandybridge"),
        (HASWELL, "x64 haswell", "x64 haswell"),
        (f"{HASWELL} avx_vnni", "x64 alderlake", "x64 haswell"),
        (f"{HASWELL} {AVX512}", "x64 skylakex", "x64 skylakex"),
        (f"{HASWELL} avx512f avx512cd avx512vl avx512dq", "x64 haswell", "x64 haswell"),
        (f"{HASWELL} avx_vnni {AVX512} avx512vbmi avx512_vnni", "x64 icelake", "x64 skylakex"),
    ],
)
def test_a_this_cpu_build_picks_the_variant_ggml_would_load_and_the_baseline(
    flags: str, llama: str, whisper: str
) -> None:
    assert _this_cpu(LLAMA, flags) == llama
    assert _this_cpu(WHISPER, flags) == whisper


SPR = f"{HASWELL} avx_vnni {AVX512} avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the x86 variants' table")
@pytest.mark.parametrize(
    ("flags", "llama"),
    [
        (SPR, "x64 sapphirerapids"),  # what an official release loads on Xeon 4th gen and later
        (SPR.replace(" amx_int8", ""), "x64 icelake"),  # ggml's score needs AMX_INT8
        (f"{HASWELL} avx_vnni", "x64 alderlake"),
    ],
)
def test_a_this_cpu_build_with_the_added_amx_variant_picks_it_on_an_amx_cpu_only(
    flags: str, llama: str
) -> None:
    assert _this_cpu(f"{LLAMA} sapphirerapids", flags) == llama


def _vulkan_choice(flags: str, override: str | None = None) -> subprocess.CompletedProcess[str]:
    text = SCRIPT.read_text()
    wheel_cpu = next(ln for ln in text.splitlines() if ln.startswith("VULKAN_WHEEL_CPU="))
    funcs = [text[text.index(f"{name}() {{") :].split("\n}\n", 1)[0] + "\n}\n"
             for name in ("die", "vulkan_choice")]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "EXEDRA_VULKAN_FROM"}
    if override is not None:
        env["EXEDRA_VULKAN_FROM"] = override
    body = 'log() { echo "$*" >&2; }\n' + wheel_cpu + "\n" + "".join(funcs)
    argv = ["bash", "-c", body + 'vulkan_choice "$1"', "-", flags]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env, check=False)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the wheel is an x86-64 build")
@pytest.mark.parametrize(
    ("flags", "override", "choice"),
    [
        (SPR, None, "wheel"),
        (SPR, "auto", "wheel"),
        (f"{HASWELL} avx_vnni", None, "source"),  # the wheel would die with SIGILL here
        (f"{HASWELL} avx_vnni {AVX512} avx512vbmi avx512_vnni", None, "source"),  # no AMX
        (SPR, "source", "source"),
        (HASWELL, "wheel", "wheel"),
    ],
)
def test_the_vulkan_llama_server_is_the_wheel_only_on_a_cpu_it_was_compiled_for(
    flags: str, override: str | None, choice: str
) -> None:
    r = _vulkan_choice(flags, override)
    assert (r.returncode, r.stdout.strip()) == (0, choice), r.stderr


def test_the_vulkan_choice_refuses_an_unknown_override() -> None:
    r = _vulkan_choice(SPR, "docker")
    assert r.returncode == 1 and "EXEDRA_VULKAN_FROM=docker" in r.stderr


def test_install_executors_refuses_an_unknown_size(tmp_path: Path) -> None:
    env = {**os.environ, "EXEDRA_EXECUTORS_CACHE": str(tmp_path)}
    r = subprocess.run([str(SCRIPT), "llama", "tiny"], capture_output=True, text=True, timeout=30,
                       env=env, check=False)  # fmt: skip
    assert r.returncode == 2 and "[portable|this-cpu]" in r.stderr


def _phases(tmp_path: Path, marks: str, codes: tuple[int, int], *args: str):
    # A `python` that records its argv and exits with the next code.
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        f"n=$(wc -l < {calls})\n"
        f'[ "$n" = 1 ] && exit {codes[0]}\n'
        f"exit {codes[1]}\n"
    )
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "EXEDRA_TEST_WORKERS": "2"}
    r = subprocess.run([str(ROOT / "scripts" / "test-phases.sh"), marks, *args], env=env,
                       capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    return r.returncode, calls.read_text().splitlines()


def test_the_suite_runs_parallel_then_serial_with_the_callers_marks(tmp_path: Path) -> None:
    code, calls = _phases(tmp_path, "not slow", (0, 0), "tests/x.py")
    assert code == 0
    assert calls == [
        "-m pytest -q -p xdist -n 2 -m (not slow) and not serial tests/x.py",
        "-m pytest -q -m (not slow) and serial tests/x.py",
    ]


def test_a_phase_with_no_test_is_not_a_failure_and_a_failure_still_runs_the_next(
    tmp_path: Path,
) -> None:
    assert _phases(tmp_path / "a", "", (5, 0))[0] == 0
    code, calls = _phases(tmp_path / "b", "", (1, 5))
    assert code == 1 and len(calls) == 2
    assert calls[0] == "-m pytest -q -p xdist -n 2 -m not serial"


def test_every_module_named_serial_exists() -> None:
    import conftest

    stems = {p.stem for d in ("tests", "properties") for p in (ROOT / d).rglob("test_*.py")}
    assert stems >= conftest.SERIAL_MODULES, conftest.SERIAL_MODULES - stems


@pytest.mark.serial
def test_a_killed_build_script_stops_its_compiler(tmp_path: Path) -> None:
    # run_logged runs inside $(build ...): killing the script must not orphan the compiler.
    text = SCRIPT.read_text()
    funcs = [text[text.index(f"{name}() {{") :].split("\n}\n", 1)[0] + "\n}\n"
             for name in ("log", "progress", "die", "run_logged")]  # fmt: skip
    marker = tmp_path / "child.pid"
    body = (
        "t0=$(date +%s)\n" + "".join(funcs)
        + f'out=$(run_logged {tmp_path}/log stage sh -c "echo \\$\\$ > {marker}; exec sleep 60")\n'
    )  # fmt: skip
    p = subprocess.Popen(["bash", "-c", body], stderr=subprocess.DEVNULL)
    import time

    deadline = time.monotonic() + 20
    while not (marker.exists() and marker.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(marker.read_text())
    p.terminate()
    p.wait(timeout=10)
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(child, 9)
        pytest.fail("the compiler outlived the killed script")


def test_just_runs_the_demo_without_echoing_its_command() -> None:
    lines = (ROOT / "justfile").read_text().split("\ndemo *args:\n", 1)[1].splitlines()
    body = [ln.strip() for ln in lines if ln.startswith("    ")][:1]
    assert body == ['@exedra-engine demo "$@"']


def test_the_demo_prints_its_endpoint_once(llama_server: str) -> None:
    env = {**os.environ, "PATH": f"{os.path.dirname(llama_server)}:{os.environ['PATH']}"}
    import sys

    r = subprocess.run([sys.executable, "-m", "exedra_engine", "demo"], env=env, timeout=120,
                       capture_output=True, text=True, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert sum(ln.startswith("endpoint ") for ln in lines) == 1, r.stdout
    assert any(ln.startswith("answer    ") for ln in lines) and 'demo "$@"' not in r.stdout


def test_the_quick_loop_leaves_slow_tests_out_and_ci_runs_them() -> None:
    recipes: dict[str, list[str]] = {}
    name = ""
    for line in (ROOT / "justfile").read_text().splitlines():
        if line and not line[0].isspace() and not line.startswith("#") and ":" in line:
            name = line.split()[0].rstrip(":")
            recipes[name] = []
        elif line.startswith("    ") and name:
            recipes[name].append(line.strip())
    # Both go through the two-phase runner (scripts/test-phases.sh), which adds the marks.
    assert any('test-phases.sh "not slow"' in c for c in recipes["test-quick"])
    assert not any("slow" in c for c in recipes["test"])
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./dev test\n" in ci
