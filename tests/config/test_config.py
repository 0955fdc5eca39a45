"""load_config() and the YAML schema: every error names file, line and field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from returns.result import Failure

from exedra_engine import Config, ConfigError, Kind, Override, load_config
from exedra_engine._core.config.parse import config_from_yaml, merge_configs

FULL = """\
env:
  OMP_NUM_THREADS: "4"
engines:
  llama:
    args: [--flash-attn, "on"]
    env: {GGML_VK_VISIBLE_DEVICES: "0"}
  transcribe:
    args: [--beam-size, "5"]
models:
  qwen:
    args:
      - --ctx-size
      - "8192"
    env:
      LLAMA_ARG_THREADS: "6"
"""


def test_full_document() -> None:
    cfg = config_from_yaml(FULL, "a.yaml").unwrap()
    assert cfg == Config(
        env={"OMP_NUM_THREADS": "4"},
        engines={
            Kind.LLAMA: Override(args=("--flash-attn", "on"), env={"GGML_VK_VISIBLE_DEVICES": "0"}),
            Kind.TRANSCRIBE: Override(args=("--beam-size", "5")),
        },
        models={"qwen": Override(args=("--ctx-size", "8192"), env={"LLAMA_ARG_THREADS": "6"})},
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("env: [", "a.yaml:2: invalid YAML"),
        (
            "env:\n  A: 1\n",
            "a.yaml:2: $.env.A: an environment value must be a string, not a number"
            " (quote it to make it a string)",
        ),
        (
            "models:\n  q:\n    args: [--ctx, 4096]\n",
            "a.yaml:3: $.models.q.args[1]: an argument must be a string, not a number",
        ),
        (
            "engines:\n  vllm: {}\n",
            "a.yaml:2: $.engines.vllm: unknown engine kind 'vllm' (known: llama, transcribe)",
        ),
        ("- a\n- b\n", "a.yaml:1: $: must be a mapping, not a sequence"),
        ("just text\n", "a.yaml:1: $: must be a mapping, not"),
        ("env:\n  A: x\n  A: y\n", "a.yaml:3: $.env.A: duplicate key 'A' (first on line 2)"),
        ("models:\n  q: {argz: []}\n", "a.yaml:2: $.models.q.argz: unknown field 'argz'"),
        ("enviroment: {}\n", "a.yaml:1: $.enviroment: unknown section 'enviroment'"),
        ("!!python/object/apply:os.system [ls]\n", "unsupported YAML tag"),
        ("env: !!binary aGVsbG8=\n", "$.env: must be a mapping, not binary data"),
        ("env:\n  <<: {A: x}\n", "a.yaml:2: $.env: merge keys (<<) are not supported"),
        ("env:\n  'A=B': x\n", "a.yaml:2: $.env['A=B']: 'A=B' is not a valid environment"),
        ('env:\n  A: "a\\0b"\n', "contains a NUL character"),
        ("models:\n  q:\n    args: --ctx-size\n", "$.models.q.args: must be a list of strings"),
        ("---\nenv: {}\n---\nenv: {}\n", "invalid YAML"),
    ],
)
def test_errors_name_file_line_and_field(text: str, message: str) -> None:
    r = config_from_yaml(text, "a.yaml")
    assert isinstance(r, Failure)
    assert isinstance(r.failure(), ConfigError)
    assert message in str(r.failure())


def test_alias_bomb_is_refused_quickly() -> None:
    # 10^8 strings if expanded; the walk must stop long before.
    lines = ["models:", "  q:", "    args: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"  q{i}:")
        lines.append(f"    args: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]")
    r = config_from_yaml("\n".join(lines), "bomb.yaml")
    assert isinstance(r, Failure)
    # An alias reports the line of the node it names.
    assert (
        str(r.failure())
        == "bomb.yaml:3: $.models.q1.args[0]: an argument must be a string, not a sequence"
    )


def test_many_aliases_to_one_override_hit_the_node_bound() -> None:
    names = [f"m{i}" for i in range(40_000)]
    text = "models:\n  m: &o {args: [--ctx-size, '1']}\n" + "".join(f"  {n}: *o\n" for n in names)
    r = config_from_yaml(text, "wide.yaml")
    assert isinstance(r, Failure)
    assert "more than 100000 nodes" in str(r.failure())


@pytest.mark.parametrize("text", ["", "# only a comment\n", "env:\nengines:\nmodels:\n", "{}"])
def test_empty_documents_are_empty_configs(text: str) -> None:
    assert config_from_yaml(text, "e.yaml").unwrap() == Config()


def test_directory_in_name_order_later_wins(tmp_path: Path) -> None:
    (tmp_path / "10-base.yaml").write_text(
        "env: {A: base, B: base}\nmodels:\n  q: {args: [--ctx-size, '1024', --lora, a.gguf],"
        " env: {X: '1'}}\n"
    )
    (tmp_path / "20-site.yaml").write_text(
        "env: {B: site}\nmodels:\n  q: {args: [--ctx-size, '2048'], env: {Y: '2'}}\n"
    )
    (tmp_path / "05-empty.yaml").write_text("")
    (tmp_path / "notes.txt").write_text("not: [yaml")
    (tmp_path / ".hidden.yaml").write_text("not: [yaml")
    cfg = load_config(tmp_path).unwrap()
    assert cfg.env == {"A": "base", "B": "site"}
    assert cfg.models["q"] == Override(
        args=("--ctx-size", "1024", "--lora", "a.gguf", "--ctx-size", "2048"),
        env={"X": "1", "Y": "2"},
    )


def test_one_file_equals_its_directory(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(FULL)
    assert load_config(tmp_path / "a.yaml").unwrap() == load_config(tmp_path).unwrap()


def test_missing_path_is_empty(tmp_path: Path) -> None:
    assert load_config(tmp_path / "nope").unwrap() == Config()


def test_default_path_is_used_for_none_and_empty(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import exedra_engine._shell.load_config as cf

    (tmp_path / "x.yaml").write_text("env: {FROM_DEFAULT: 'yes'}\n")
    monkeypatch.setattr(cf, "DEFAULT_CONFIG_PATH", str(tmp_path))
    assert load_config(None).unwrap().env == {"FROM_DEFAULT": "yes"}
    assert load_config("").unwrap().env == {"FROM_DEFAULT": "yes"}


def test_a_bad_file_in_a_directory_is_named(tmp_path: Path) -> None:
    (tmp_path / "10-ok.yaml").write_text("env: {A: x}\n")
    (tmp_path / "20-bad.yaml").write_text("env:\n  A: [x]\n")
    r = load_config(tmp_path)
    assert isinstance(r, Failure)
    assert str(r.failure()).startswith(f"{tmp_path / '20-bad.yaml'}:2: $.env.A:")


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"env: {A: \xe9}\n")
    r = load_config(bad)
    assert isinstance(r, Failure) and "not UTF-8" in str(r.failure())
    sub = tmp_path / "dir.yaml"
    sub.mkdir()
    r = load_config(tmp_path)
    assert isinstance(r, Failure) and "is a directory" in str(r.failure())


def test_merge_rules() -> None:
    a = Config(env={"A": "1"}, engines={Kind.LLAMA: Override(args=("--x",), env={"E": "a"})})
    b = Config(
        env={"A": "2", "B": "2"},
        engines={Kind.LLAMA: Override(args=("--y",), env={"E": "b", "F": "b"})},
    )
    m = merge_configs(a, b)
    assert m.env == {"A": "2", "B": "2"}
    assert m.engines[Kind.LLAMA] == Override(args=("--x", "--y"), env={"E": "b", "F": "b"})
    assert merge_configs(Config(), a) == a == merge_configs(a, Config())


def test_yaml_is_imported_only_to_parse_a_document(tmp_path: Path) -> None:
    # A cold start on a host with no config file does not pay for PyYAML (~20 ms).
    code = (
        "import sys, exedra_engine as e, exedra_engine.cli; "
        "e.load_config(sys.argv[1]).unwrap(); print('yaml' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"
