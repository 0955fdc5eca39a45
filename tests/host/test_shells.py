"""The shells (`inspect`, `load_config`, `plan`, `probe`) on an in-memory host: every read goes
through the `HostFiles` port, so no disk tree is needed (tests/memory_host.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from returns.result import Failure

from exedra_engine import (
    CPU,
    ConfigError,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    ModelSpec,
    ModelUnreadable,
    NotGGUF,
    inspect,
    load_config,
    plan_explained,
    probe,
)
from exedra_engine.testing import write_header_model
from tests.memory_host import MemoryHost

HW = Hardware(
    cpu=CPU(threads=2), executors=(ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server"),)
)
TCP_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt\n"


@pytest.fixture(scope="module")
def header(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("m") / "h.gguf"
    return write_header_model(path, vocab=1000, blocks=12, context=4096).read_bytes()


def _tcp_listen(port: int) -> str:
    return TCP_HEADER + f"   0: 0100007F:{port:04X} 00000000:0000 0A 0 0 0 0 0 0 0 0\n"


def test_inspect_reads_through_the_port(header: bytes) -> None:
    host = MemoryHost({"/models/q.gguf": header})
    m = inspect("/models/q.gguf", host).unwrap()
    assert (m.architecture, m.blocks, m.context, m.size) == ("qwen2", 12, 4096, len(header))
    assert host.opened == ["/models/q.gguf"]


@pytest.mark.parametrize(
    ("path", "error", "needle"),
    [
        ("/models/none.gguf", ModelUnreadable, "No such file"),
        ("/models", ModelUnreadable, "is a directory"),
        ("/models/fifo.gguf", NotGGUF, "not a regular file"),
        ("/models/junk.gguf", NotGGUF, "bad magic"),
    ],
)
def test_inspect_failures_name_the_path(path: str, error: type, needle: str) -> None:
    host = MemoryHost({"/models/junk.gguf": b"JUNKJUNK"}, special=["/models/fifo.gguf"])
    r = inspect(path, host)
    assert isinstance(r, Failure)
    assert isinstance(r.failure(), error) and path in str(r.failure())
    assert needle in str(r.failure())


def test_load_config_reads_a_directory_in_name_order() -> None:
    host = MemoryHost(
        {
            "/etc/e.d/10-base.yaml": "env: {A: '1', B: '1'}\n",
            "/etc/e.d/20-gpu.yml": "env: {B: '2'}\nengines: {llama: {args: [-ngl, '99']}}\n",
            "/etc/e.d/.hidden.yaml": "env: {A: hidden}\n",
            "/etc/e.d/README": "not yaml: [",
        }
    )
    cfg = load_config("/etc/e.d", host).unwrap()
    assert cfg.env == {"A": "1", "B": "2"}
    assert cfg.engines[Kind.LLAMA].args == ("-ngl", "99")
    assert host.opened == ["/etc/e.d/10-base.yaml", "/etc/e.d/20-gpu.yml"]


@pytest.mark.parametrize(
    ("files", "special", "path", "needle"),
    [
        ({}, [], "/etc/none", None),
        ({}, ["/etc/e.d/fifo.yaml"], "/etc/e.d", "/etc/e.d/fifo.yaml: not a regular file"),
        ({"/etc/e.d/X.YAML": "env: {}"}, [], "/etc/e.d", "/etc/e.d/X.YAML: rename it"),
        ({"/etc/c.yaml": "env: [1]\n"}, [], "/etc/c.yaml", "/etc/c.yaml:1"),
        ({"/etc/c.yaml": b"\xff"}, [], "/etc/c.yaml", "not UTF-8"),
    ],
)
def test_load_config_failures_name_the_file(
    files: dict[str, str | bytes], special: list[str], path: str, needle: str | None
) -> None:
    r = load_config(path, MemoryHost(files, special=special))
    if needle is None:
        assert r.unwrap().env == {}
        return
    assert isinstance(r, Failure) and isinstance(r.failure(), ConfigError)
    assert needle in str(r.failure())


def test_plan_reads_header_and_ports_through_the_port(header: bytes) -> None:
    host = MemoryHost(
        {
            "/models/q.gguf": header,
            "/proc/net/tcp": _tcp_listen(18080),
            "/proc/net/tcp6": TCP_HEADER,
        }
    )
    e = plan_explained(ModelSpec(path="/models/q.gguf", kind=Kind.LLAMA), HW, files=host)
    p = e.unwrap().plan
    assert p.model is not None and p.model.blocks == 12
    assert p.port == 18081  # 18080 listens on the in-memory host


def test_plan_without_the_model_file_is_a_dry_run() -> None:
    host = MemoryHost({"/proc/net/tcp": TCP_HEADER})
    p = plan_explained(ModelSpec(path="/models/later.gguf", kind=Kind.LLAMA), HW, files=host)
    assert p.unwrap().plan.model is None and host.opened == []


def test_plan_refuses_a_model_that_is_not_gguf() -> None:
    host = MemoryHost({"/models/q.gguf": b"not a model"})
    r = plan_explained(ModelSpec(path="/models/q.gguf", kind=Kind.LLAMA), HW, Constraints(), host)
    assert isinstance(r, Failure) and isinstance(r.failure(), NotGGUF)


def test_probe_on_the_memory_host() -> None:
    host = MemoryHost(
        {
            "/proc/meminfo": "MemTotal:       16384 kB\nMemAvailable:    8192 kB\n",
            "/sys/class/drm/renderD128/device/mem_info_vram_total": "8589934592\n",
            "/opt/llama/lib/libggml-vulkan.so": b"",
            "/opt/llama/bin/llama-server": b"",
        },
        dirs=["/sys/class/drm/renderD128/device/drm/card0"],
        links={
            "/sys/class/drm/renderD128/device/driver": "../../bus/pci/drivers/amdgpu",
            "/usr/bin/llama-server": "/opt/llama/bin/llama-server",
        },
        executables=["/opt/llama/bin/llama-server"],
        affinity=3,
    )
    hw = probe(host).unwrap()
    assert hw.cpu.threads == 3
    assert [(g.card, g.driver, g.vram) for g in hw.gpus] == [("card0", "amdgpu", 8 << 30)]
    exe = hw.executor(Kind.LLAMA)
    assert exe is not None and exe.path == "/usr/bin/llama-server" and "vulkan" in exe.backends


def test_the_memory_host_agrees_with_the_disk(tmp_path: Path) -> None:
    # The fake must behave as LocalHost does where both can be asked.
    from exedra_engine._shell.local.host import LocalHost

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.yaml").write_text("x")
    disk, mem = LocalHost(str(tmp_path)), MemoryHost({"/d/a.yaml": "x"})
    for path in ("/d", "/d/a.yaml", "/d/none", "/d/a.yaml/under"):
        assert disk.file_kind(path) == mem.file_kind(path), path
        assert disk.exists(path) == mem.exists(path), path
    assert disk.list_dir("/d") == mem.list_dir("/d")
    for host in (disk, mem):
        with pytest.raises(IsADirectoryError):
            host.open_file("/d")
        stream, size = host.open_file("/d/a.yaml")
        with stream:
            assert (stream.read(), size) == (b"x", 1)


def test_paths_may_be_bytes_or_path_like(tmp_path: Path) -> None:
    from exedra_engine import inspect, load_config
    from exedra_engine.testing import write_tiny_llama

    conf = tmp_path / "c.yaml"
    conf.write_text("env: {A: b}\n")
    want = load_config(str(conf)).unwrap()
    assert want.env == {"A": "b"}
    assert load_config(conf).unwrap() == want
    assert load_config(os.fsencode(conf)).unwrap() == want
    model = write_tiny_llama(tmp_path / "m.gguf")
    info = inspect(str(model)).unwrap()
    assert inspect(model).unwrap() == info
    assert inspect(os.fsencode(model)).unwrap() == info
    undecodable = os.fsencode(tmp_path) + b"/m\xff.gguf"
    assert "m\udcff.gguf" in str(inspect(undecodable).failure())
