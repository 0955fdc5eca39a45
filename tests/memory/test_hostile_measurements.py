"""Measurements are validated where they come in, with bounds: llama-fit-params' output (ASCII
digits only, no control characters in names, no device twice, its line named) and a hardware
file's ``measurements`` (a context an executor takes, sizes below 1 PiB, printable names,
settings the executor's table can read), each error naming the file and the field, so one
bad measurement is refused where it is, not at every plan without a name."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from exedra_engine import CPU, Hardware
from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._core.memory.fit_params import (
    MAX_CTX,
    FitMeasurement,
    FitRow,
    ctx_from_log,
    measurement_for,
    rows_from_print,
)
from exedra_engine._shell.hardware_file import read_hardware
from exedra_engine.errors import HardwareFileError, MeasureError, PlanError

MiB = 1 << 20
HOST = FitRow(name="Host", model=355 * MiB, context=0, compute=12 * MiB)


@pytest.mark.parametrize(
    ("stdout", "said"),
    [
        ("CUDA0 \u0661\u0662\u0663 384 898\nHost 355 0 12\n", "(line 1)"),  # Arabic-Indic digits
        ("CUDA0 123 384 898\nHost 355 0 \uff11\uff12\n", "(line 2)"),  # full-width digits
        ("CU\x00DA0 1 2 3\nHost 355 0 12\n", "(line 1)"),
        ("\x1b[2JCUDA0 1 2 3\nHost 355 0 12\n", "(line 1)"),
        ("CUDA0 1 2 3\nCUDA0 4 5 6\nHost 355 0 12\n", "CUDA0 twice (line 2)"),
        ("CUDA0 999999999999 2 3\nHost 355 0 12\n", "past 1 PiB"),
        ("CUDA0 1 2 3\u2028Host 355 0 12\n", "(line 1)"),  # no Unicode line breaks
    ],
)
def test_fit_params_output_is_ascii_bounded_and_names_its_line(stdout: str, said: str) -> None:
    with pytest.raises(MeasureError) as e:
        rows_from_print(stdout)
    assert said in str(e.value)
    assert "\x1b" not in str(e.value).replace("\\x1b", "")


def test_fit_params_output_of_the_real_shape_is_read() -> None:
    devices, host = rows_from_print("CUDA0 17904 384 898\nCUDA1 1200 64 100\nHost 355 0 12\n")
    assert [d.name for d in devices] == ["CUDA0", "CUDA1"] and host == HOST


@pytest.mark.parametrize("n", ["0", str(MAX_CTX + 1), "\u0661\u0662\u0663"])
def test_the_logs_context_is_a_context_size_in_ascii(n: str) -> None:
    log = f"0.00.141.596 D llama_context: n_ctx         = {n}\n"
    if not n.isascii():
        assert ctx_from_log(log) is None
    else:
        with pytest.raises(MeasureError, match="not a context size"):
            ctx_from_log(log)
    assert ctx_from_log("0.00.1 D llama_context: n_ctx         = 4096\n") == 4096


def _file(tmp_path: Path, m: FitMeasurement) -> Path:
    hw = Hardware(cpu=CPU(threads=4, ram=1 << 34), measurements=(m,))
    path = tmp_path / "host.json"
    path.write_bytes(msgspec.json.encode(hw))
    return path


def _m(**changes: object) -> FitMeasurement:
    base = FitMeasurement(model="/m/model.gguf", settings=("--ctx-size", "4096"), ctx=4096,
                          host=HOST)  # fmt: skip
    return msgspec.structs.replace(base, **changes)


@pytest.mark.parametrize(
    ("m", "field", "said"),
    [
        (_m(ctx=2**63 - 1), "$.measurements[0].ctx", "not a context size"),
        (_m(ctx=-1), "$.measurements[0].ctx", "not a context size"),
        (_m(host=FitRow(name="Host", model=1 << 62, context=0, compute=0)),
         "$.measurements[0].host.model", "1 PiB"),
        (_m(devices=(FitRow(name="CUDA0", model=1, context=1, compute=1),) * 2),
         "$.measurements[0].devices[1].name", "listed twice"),
        (_m(devices=(FitRow(name="CU\x1bDA0", model=1, context=1, compute=1),)),
         "$.measurements[0].devices[0].name", "printable ASCII"),
        (_m(devices=(FitRow(name="CUDA\x00", model=1, context=1, compute=1),)),
         "$.measurements[0].devices[0].name", "printable ASCII"),
        (_m(host=FitRow(name="CUDA0", model=1, context=1, compute=1)),
         "$.measurements[0].host.name", "is not Host"),
        (_m(model="/m/\x1b[2J.gguf"), "$.measurements[0].model", "control character"),
        (_m(settings=("--ctx-size",)), "$.measurements[0].settings", "cannot read them"),
        (_m(settings=("--ctx-size", "1") * 200), "$.measurements[0].settings", "more than"),
    ],
)  # fmt: skip
def test_a_bad_measurement_in_a_hardware_file_names_the_file_and_field(
    tmp_path: Path, m: FitMeasurement, field: str, said: str
) -> None:
    path = _file(tmp_path, m)
    with pytest.raises(HardwareFileError) as e:
        read_hardware(path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: {field}: "), msg
    assert said in msg and "\x1b" not in msg and "\x00" not in msg


def test_a_good_measurement_in_a_hardware_file_is_read(tmp_path: Path) -> None:
    dev = FitRow(name="CUDA0", model=MiB, context=MiB, compute=MiB, free=8 * MiB)
    hw = read_hardware(_file(tmp_path, _m(devices=(dev,))))
    assert hw.measurements[0].devices == (dev,)


def test_a_bad_measurement_built_in_code_is_named_not_anonymous() -> None:
    good = _m()
    bad = _m(model="/other.gguf", settings=("--ctx-size",))
    with pytest.raises(PlanError) as e:
        measurement_for((good, bad), LLAMA, "/m/model.gguf", ("--ctx-size", "4096"))
    assert "measurements[1] (/other.gguf)" in str(e.value)


def test_plan_from_a_file_with_an_absurd_context_is_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    from tests.conftest import cli

    path = _file(tmp_path, _m(ctx=2**63 - 1))
    r = cli("plan", "--model", "/m/model.gguf", "--kind", "llama", "--hardware", str(path),
            "--no-config", "--no-port-check")  # fmt: skip
    assert r.code == 2
    (line,) = r.err.splitlines()
    assert str(path) in line and "$.measurements[0].ctx" in line
    assert "GiB" not in r.out
