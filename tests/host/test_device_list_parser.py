"""``llama-server --list-devices`` read as hostile input: the lines llama.cpp prints
(common/arg.cpp, common_print_available_devices) become `Device`s; anything else is refused
with the line named, in bounded time."""

from __future__ import annotations

import time

import pytest

from exedra_engine import Device, EngineError
from exedra_engine._core.host.devices import (
    MAX_DEVICE_LIST,
    MAX_DEVICES,
    DeviceListError,
    offloads,
    parse_device_list,
)
from exedra_engine._core.memory.settings import MIB

LAVAPIPE = (
    "Available devices:\n  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)\n"
)


def test_lavapipe_as_the_vulkan_build_lists_it() -> None:
    assert parse_device_list(LAVAPIPE) == (
        Device(
            name="Vulkan0",
            description="llvmpipe (LLVM 15.0.6, 256 bits)",
            total=2048 * MIB,
            free=2048 * MIB,
        ),
    )


def test_the_backends_log_before_the_list_is_skipped() -> None:
    text = (
        "load_backend: loaded Vulkan backend from /x/libggml-vulkan.so\n"
        "ggml_vulkan: Found 2 Vulkan devices:\n"
        + LAVAPIPE.replace(
            "\n  Vulkan0", "\n  CUDA0: NVIDIA H100 80GB HBM3 (81089 MiB, 80562 MiB free)\n  Vulkan0"
        )
    )
    got = parse_device_list(text)
    assert [d.name for d in got] == ["CUDA0", "Vulkan0"]
    assert got[0].total == 81089 * MIB and got[0].free == 80562 * MIB


def test_none_is_an_empty_list() -> None:
    assert parse_device_list("Available devices:\n  (none)\n") == ()


def test_an_rpc_device_name_with_its_endpoint() -> None:
    got = parse_device_list(
        "Available devices:\n  RPC[10.0.0.2:50052]: RPC (100 MiB, 50 MiB free)\n"
    )
    assert got[0].name == "RPC[10.0.0.2:50052]"


def test_accelerators_are_listed_but_take_no_layers() -> None:
    got = parse_device_list(
        "Available devices:\n  BLAS: OpenBLAS (0 MiB, 0 MiB free)\n"
        "  Vulkan0: AMD Radeon (8192 MiB, 8000 MiB free)\n"
    )
    assert [offloads(d) for d in got] == [False, True]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "no 'Available devices:' line"),
        ("usage: llama-server [options]\n", "no 'Available devices:' line"),
        (LAVAPIPE + LAVAPIPE, "appears 2 times"),
        ("Available devices:\n  Vulkan0 llvmpipe 2048 MiB\n", "line 2: "),
        ("Available devices:\n  Vulkan0: x (2048 MiB, 4096 MiB free)\n", "more free than it has"),
        (
            "Available devices:\n  Vulkan0: x (999999999999 MiB, 1 MiB free)\n",
            "more than 16777216 MiB",
        ),
        (LAVAPIPE + "  Vulkan0: again (1 MiB, 1 MiB free)\n", "line 3: Vulkan0 is listed twice"),
        ("Available devices:\n  Vulkan0: a\x1b[31mred (1 MiB, 1 MiB free)\n", "not printable"),
        ("Available devices:\n  Vulkan0: " + "d" * 300 + " (1 MiB, 1 MiB free)\n", "not printable"),
        ("Available devices:\n  -rf: x (1 MiB, 1 MiB free)\n", "line 2: "),
        ("Available devices:\n  Vulkan0: x (-1 MiB, 1 MiB free)\n", "line 2: "),
        ("Available devices:\n  (none)\n  Vulkan0: x (1 MiB, 1 MiB free)\n", "line 2: "),
    ],
)
def test_what_llama_cpp_does_not_print_is_refused_naming_the_line(text: str, said: str) -> None:
    with pytest.raises(DeviceListError) as e:
        parse_device_list(text)
    assert said in str(e.value)
    assert isinstance(e.value, EngineError)


def test_a_flood_of_devices_is_refused_by_count() -> None:
    lines = "".join(f"  Vulkan{i}: x (1 MiB, 1 MiB free)\n" for i in range(MAX_DEVICES + 1))
    with pytest.raises(DeviceListError, match=f"more than {MAX_DEVICES}"):
        parse_device_list("Available devices:\n" + lines)


def test_a_flood_of_text_is_refused_before_it_is_read() -> None:
    text = LAVAPIPE + "x" * (10 * MAX_DEVICE_LIST)
    start = time.perf_counter()
    with pytest.raises(DeviceListError, match=f"more than {MAX_DEVICE_LIST}"):
        parse_device_list(text)
    assert time.perf_counter() - start < 0.1


def test_a_long_line_just_under_the_text_cap_is_refused_quickly() -> None:
    text = "Available devices:\n  Vulkan0: " + "(" * (MAX_DEVICE_LIST - 40) + "\n"
    start = time.perf_counter()
    with pytest.raises(DeviceListError, match="line 2"):
        parse_device_list(text)
    assert time.perf_counter() - start < 0.5
