"""Issue 20 item 8: the pure plan made cheaper without changing a figure.

The fast paths (the flag reader's, the merge's lazy provenance, the memory estimate's
placement by layer and its KV blocks worked out once per kind) are checked here against the
general paths they stand in for."""

from __future__ import annotations

from pathlib import Path

import pytest

from exedra_engine import (
    CPU,
    Config,
    Constraints,
    ExecutorInfo,
    Hardware,
    Kind,
    ModelSpec,
    Override,
    explain_launch,
    plan_launch,
)
from exedra_engine._core.executors.builtin import LLAMA
from exedra_engine._core.executors.flags import Item
from exedra_engine._core.gguf.inventory import ModelInventory
from exedra_engine._core.memory.kv import _kv_block, context_geometry, kv_bytes
from exedra_engine._core.memory.placement import (
    _tensor_place,
    bytes_by_layer,
    place,
    weights_by_place,
)
from exedra_engine._core.memory.settings import read_settings, settings_of
from exedra_engine._core.plan.layer_checks import Layer
from exedra_engine._core.plan.layers import merge
from exedra_engine._core.plan.provenance import Said
from tests.conftest import hardware_file
from tests.memory_models import cpu_host, gemma3_270m, gpu_host, llama_135m


def _slow(table: object, argv: tuple[str, ...]) -> tuple[Item, ...]:
    saved = table._plain  # type: ignore[attr-defined]
    table._plain = {}  # type: ignore[attr-defined]
    try:
        return table._read(argv, False)[0]  # type: ignore[attr-defined, no-any-return]
    finally:
        table._plain = saved  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "argv",
    [
        ("-c", "8", "--no-webui", "--ctx-size=9", "x", "--lora", "a", "--lora", "b"),
        ("--temp", "0.7", "-ngl", "99", "--jinja", "--port"),
        ("--override-kv", "a=int:1", "-ot", "x=CPU", "--host", "::1", "-1"),
    ],
)
def test_fast_reader_reads_as_the_general_one(argv: tuple[str, ...]) -> None:
    fast = LLAMA.flags._read(argv, False)[0]
    assert fast == _slow(LLAMA.flags, argv)


def test_replaced_worked_out_on_demand() -> None:
    layers = [
        Layer(name="low", rank=0, args=("-c", "1", "--threads", "5"), env=(("TZ", "A"),)),
        Layer(name="mid", rank=1, args=("--ctx-size", "2", "--lora", "x")),
        Layer(
            name="high",
            rank=2,
            args=("-c", "3", "--lora", "y"),
            env=(("TZ", "B"), ("LLAMA_ARG_THREADS", "9")),
        ),
    ]
    m = merge(LLAMA, layers)
    # The variable's layer is above the flag's: the flag goes, the variable replaced it.
    assert m.args == ("--lora", "x", "-c", "3", "--lora", "y")
    assert m.replaced == {
        "--ctx-size": (
            Said(layer="low", what="arg", tokens=("-c", "1"), at=0),
            Said(layer="mid", what="arg", tokens=("--ctx-size", "2"), at=0),
        ),
        "LLAMA_ARG_THREADS": (Said(layer="low", what="arg", tokens=("--threads", "5"), at=2),),
        "TZ": (Said(layer="low", what="env", tokens=("TZ", "A")),),
    }
    assert {p.key: p.replaced for p in m.provenance if p.replaced} == m.replaced


def _row2() -> tuple[ModelSpec, Hardware, Constraints]:
    spec = ModelSpec(
        id="qwen",
        path="/m/qwen.gguf",
        kind=Kind.LLAMA,
        capabilities=("llm",),
        run_args=("--temp", "0.7", "--top-k", "40", "--ctx-size", "8192"),
    )
    cfg = Config(
        env={"OMP_NUM_THREADS": "8"},
        engines={Kind.LLAMA: Override(args=("--flash-attn", "on"), env={"LLAMA_ARG_MLOCK": "0"})},
        models={"qwen": Override(args=("--ctx-size", "16384", "--jinja"))},
    )
    con = Constraints(
        api_key="secret",
        ctx=4096,
        overrides=cfg,
        extra_args=("--seed", "42"),
        extra_env=("TZ=UTC",),
    )
    hw = Hardware(
        cpu=CPU(threads=8, ram=1 << 35),
        executors=(ExecutorInfo(kind=Kind.LLAMA, path="/usr/bin/llama-server"),),
    )
    return spec, hw, con


def test_plan_and_explain_agree() -> None:
    spec, hw, con = _row2()
    plan = plan_launch(spec, hw, con).unwrap()
    e = explain_launch(spec, hw, con).unwrap()
    assert e.plan == plan
    ctx = next(p for p in e.provenance if p.key == "--ctx-size")
    assert ctx.said.layer == "config models.qwen"
    assert [r.layer for r in ctx.replaced] == ["run_args", "engine"]


@pytest.mark.parametrize("model", [gemma3_270m, llama_135m])
@pytest.mark.parametrize(
    "argv",
    [
        (),
        ("-ngl", "10"),
        ("-ngl", "0"),
        ("-ts", "3,1"),
        ("-ngl", "7", "-ts", "1,2", "-sm", "none"),
        ("-c", "8192", "-np", "3", "--swa-full"),
        ("-ctk", "q8_0", "-ctv", "q4_0", "-fa", "on"),
    ],
)
def test_placement_by_layer_and_kv_blocks_keep_their_figures(
    model: object, argv: tuple[str, ...]
) -> None:
    inv: ModelInventory = model()  # type: ignore[operator]
    s = read_settings(LLAMA, argv)
    sh = context_geometry(inv, s, None)
    for hw in (cpu_host(), gpu_host(8 << 30), gpu_host(8 << 30, 4 << 30)):
        p = place(inv, s, hw, "llama")
        host, dev = 0, [0] * len(p.devices)
        for t in inv.tensors:  # the general path, one tensor at a time
            where = _tensor_place(t, inv, s, p, [])
            if where < 0:
                host += t.size
            else:
                dev[where] += t.size
        assert weights_by_place(inv, s, p) == (host, tuple(dev))
        assert weights_by_place(inv, s, p, bytes_by_layer(inv)) == (host, tuple(dev))
    swa_used = inv.sliding_window > 0 and any(inv.swa_layers)
    each = tuple(
        _kv_block(inv, s, sh, il, swa_used and inv.swa_layers[il]) for il in range(inv.blocks)
    )
    assert kv_bytes(inv, s, sh) == each


def test_settings_from_the_merge_items() -> None:
    m = merge(
        LLAMA,
        [
            Layer(
                name="a",
                rank=0,
                args=("-c", "512", "-ot", "a=CPU,b=CUDA0", "--no-kv-offload", "-ngl", "all"),
            )
        ],
    )
    assert settings_of(LLAMA, m.items, m.env) == read_settings(LLAMA, m.args, m.env)


@pytest.mark.parametrize(
    ("argv", "env"),
    [
        ((), ()),
        (("-c", "2048", "-np", "2"), ()),
        (("--cache-ram", "64"), ("LLAMA_ARG_CTX_SIZE=999",)),
        (
            (
                "-ctk",
                "q8_0",
            ),
            ("LLAMA_ARG_CACHE_RAM=12",),
        ),
    ],
)
@pytest.mark.parametrize(("ctx", "cache"), [(None, 0), (4096, None), (8192, 300), (None, None)])
def test_decider_settings_read_as_the_argv_would(
    argv: tuple[str, ...], env: tuple[str, ...], ctx: int | None, cache: int | None
) -> None:
    from exedra_engine._core.memory.decide import _Decider

    items = LLAMA.flags.split_items(argv, "argv")
    s = settings_of(LLAMA, items, env)
    d = _Decider(
        gemma3_270m(), items, env=env, hw=cpu_host(), profile=LLAMA, sides=(None, None), settings=s
    )
    extra = d.flags(ctx, cache)
    assert d.settings(extra) == read_settings(LLAMA, (*argv, *extra), env)


# -- start-up cost: what a plain plan loads ---------------------------------------------

LAZY = (
    "returns",  # the CLI makes no Result
    "exedra_engine._core.emit",  # a plain plan emits nothing
    "exedra_engine._shell.local.flag_tables",  # only --explain/--strict and probe ask binaries
    "exedra_engine._core.executors.helptext",
    "yaml",  # only `config` prints YAML and override files parse it
    "socket",  # the port dump needs _socket only
    "trio",  # the launcher
    "shutil",  # zlib, bz2 and lzma with it
)


def test_a_plain_plan_loads_none_of_the_lazy_modules(tmp_path: Path) -> None:
    import subprocess
    import sys

    # A hardware file: probing this machine asks its installed executors for their versions
    # (the flag-table cache), which is what a probe is for.
    argv = [
        "plan", "--model", str(tmp_path / "absent.gguf"), "--kind", "llama",
        "--no-config", "--hardware", str(hardware_file(tmp_path)), "--json",
    ]  # fmt: skip
    code = (
        "import sys, io, contextlib\n"
        "from exedra_engine.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = main(sys.argv[1:])\n"
        "print(code, *sorted(sys.modules))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True
    )
    status, *loaded = r.stdout.split()
    assert status == "0", r.stderr
    assert [m for m in loaded if m.split(".")[0] in LAZY or m.startswith(LAZY)] == []
