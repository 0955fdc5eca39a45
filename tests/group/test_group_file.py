"""Group files (the members of a group, as YAML) and ``plan --group FILE``: a mistake names
the file, the line and the member; the command prints each member's plan and the shares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exedra_engine import ConfigError, Kind, load_group
from exedra_engine._core.group.file import parse_group_file
from exedra_engine.testing import write_tiny_llama, write_tiny_whisper
from tests.conftest import cli

GOOD = """\
members:
  - {id: chat, model: /srv/chat.gguf, kind: llama, ctx: 8192}
  - id: asr
    model: /srv/ggml-base.en.bin
    kind: transcribe
    threads: 2
    weight: 2
    args: [--language, en]
    env: {GGML_SCHED: "1"}
"""


def test_a_group_file_gives_each_members_spec_constraints_and_weight() -> None:
    g = parse_group_file(GOOD, "group.yaml")
    chat, asr = g.members
    assert chat.spec.id == "chat" and chat.spec.kind == Kind.LLAMA and chat.constraints.ctx == 8192
    assert asr.spec.kind == Kind.TRANSCRIBE and asr.weight == 2 and asr.line == 3
    assert asr.constraints.threads == 2
    assert asr.constraints.extra_args == ("--language", "en")
    assert asr.constraints.extra_env == ("GGML_SCHED=1",)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "members:\n  - {id: chat, model: /m.gguf}\n  - id: asr\n    model: /w.bin\n"
            "    ctx: lots\n",
            "group.yaml:5: members[1] (asr): ctx: expected an integer, not a string",
        ),
        (
            "members:\n  - {id: a, model: /m.gguf, colour: red}\n",
            "group.yaml:2: members[0] (a): unknown field 'colour'",
        ),
        ("members:\n  - {id: a}\n", "group.yaml:2: members[0] (a): model: required"),
        ("members:\n  - {model: /m.gguf}\n", "group.yaml:2: members[0]: id: required"),
        (
            "members:\n  - {id: a, model: /m.gguf, kind: vision}\n",
            "members[0] (a): kind: unknown kind (the value given is not shown",
        ),
        (
            "members:\n  - {id: a, model: /m.gguf, weight: 0}\n",
            "members[0] (a): weight: expected an integer from 1",
        ),
        (
            "members:\n  - {id: a, model: /m.gguf, args: --flag}\n",
            "members[0] (a): args: must be a list of strings",
        ),
        (
            "members:\n  - {id: a, model: 7}\n",
            "group.yaml:2: members[0] (a): model: the value must be a string",
        ),
        (
            "members:\n  - {id: a, model: /m.gguf}\n  - {id: a, model: /n.gguf}\n",
            "group.yaml:3: members[1] (a): id: 'a' is already the id of members[0]",
        ),
        (
            "members:\n  - {id: a, model: /m.gguf, port: 9000}\n"
            "  - {id: b, model: /n.gguf, port: 9000}\n",
            "group.yaml:3: members[1] (b): port: 9000 is already the port of members[0] (a)",
        ),
        ("models: []\n", "group.yaml:1: models: unknown section (expected members)"),
        ("members: []\n", "group.yaml:1: members: expected a list of members"),
        (
            "members:\n  - id: a\n    model: /m.gguf\n    env: [A=1, B]\n",
            "group.yaml:4: members[0] (a): env[1]: expected KEY=VALUE",
        ),
        ("", "group.yaml: the group file is empty"),
        ("members: [\n", "group.yaml:2: invalid YAML"),
    ],
)
def test_a_mistake_names_the_file_the_line_and_the_member(text: str, said: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_group_file(text, "group.yaml")
    assert said in str(e.value), str(e.value)
    assert e.value.file == "group.yaml"


def test_load_group_reads_each_api_key_from_its_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "g.yaml"
    f.write_text("members:\n  - {id: a, model: /m.gguf, api_key_env: A_KEY}\n")
    monkeypatch.setenv("A_KEY", "s3cret-key-value")
    (a,) = load_group(f).unwrap()
    assert a.constraints.api_key == "s3cret-key-value" and a.constraints.api_key_env == "A_KEY"
    monkeypatch.delenv("A_KEY")
    err = load_group(f).failure()
    assert "members[0] (a): api_key_env: variable A_KEY is not set" in str(err)


@pytest.fixture
def group_file(tmp_path: Path) -> Path:
    write_tiny_llama(tmp_path / "a.gguf")
    write_tiny_llama(tmp_path / "b.gguf")
    write_tiny_whisper(tmp_path / "w.bin")
    f = tmp_path / "group.yaml"  # ctx 256: the tiny model's own (more is a finding)
    f.write_text(
        "members:\n"
        f"  - {{id: chat, model: {tmp_path}/a.gguf, ctx: 256}}\n"
        f"  - {{id: side, model: {tmp_path}/b.gguf, weight: 2}}\n"
        f"  - {{id: asr, model: {tmp_path}/w.bin, kind: transcribe}}\n"
    )
    return f


def test_plan_group_json_holds_each_members_plan_and_share(group_file: Path, hardware: str) -> None:
    r = cli("plan", "--group", str(group_file), "--hardware", hardware, "--no-config",
            "--no-port-check", "--json")  # fmt: skip
    assert r.code == 0, r.err
    g = json.loads(r.out)
    assert [p["spec"]["id"] for p in g["plans"]] == ["chat", "side", "asr"]
    assert [s["port"] for s in g["shares"]] == [18080, 18081, 18082]
    assert [s["cpus"] for s in g["shares"]] == [[0], [1, 2], [3]]  # side has weight 2
    assert sum(s["memory"] for s in g["shares"]) <= g["budget"]
    assert any("assumed 0-3" in n for n in g["notes"])


def test_plan_group_text_and_explain_print_each_member_and_why(
    group_file: Path, hardware: str
) -> None:
    r = cli("plan", "--group", str(group_file), "--hardware", hardware, "--no-config",
            "--no-port-check", "--explain")  # fmt: skip
    assert r.code == 0, r.err
    assert r.out.count("member    ") == 3 and "share     port 18080" in r.out
    assert "shares, and why:" in r.out and "asr: memory" in r.out
    assert r.out.count("findings  none") == 3


def test_plan_group_explain_adds_where_each_part_came_from_and_the_arithmetic(
    group_file: Path, hardware: str
) -> None:
    # The plain output is the plans, shares and findings; --explain adds, per member, its
    # memory arithmetic and each argv option's layer (as plan --explain), then the shares'.
    argv = ("plan", "--group", str(group_file), "--hardware", hardware, "--no-config",
            "--no-port-check")  # fmt: skip
    plain, explained = cli(*argv), cli(*argv, "--explain")
    assert plain.code == explained.code == 0, plain.err + explained.err
    assert "where each part came from" not in plain.out and "shares, and why" not in plain.out
    assert "Host (resident, estimated)" not in plain.out
    # the whisper member's model has no GGUF header, as expected: not worded as a fault
    assert "header not read" not in plain.out
    assert "whisper-server's models are not GGUF files, as expected" in plain.out
    assert explained.out.count("where each part came from") == 3
    members = explained.out.split("member    ")[1:]
    for member, pinned in zip(members, ("--cpu-range 0-0", "--cpu-range 1-2", ""), strict=True):
        lines = member.split("where each part came from", 1)[1].splitlines()
        assert any(ln.split()[:2] == ["arg", "--threads"] and ln.split()[-1] == "engine"
                   for ln in lines), member  # fmt: skip
        assert not pinned or any(pinned in ln for ln in lines), member
    assert "Host (resident, estimated)" in members[0]
    assert "shares, and why:" in explained.out and "side: CPUs 1-2, 2 threads" in explained.out
    # every plain line is still there, in order
    it = iter(explained.out.splitlines())
    assert all(any(ln == e for e in it) for ln in plain.out.splitlines())


def test_plan_group_explain_lists_a_members_findings(group_file: Path, hardware: str) -> None:
    text = group_file.read_text().replace("ctx: 256}", "ctx: 256, args: [--ctx-sise, '1']}")
    group_file.write_text(text)
    r = cli("plan", "--group", str(group_file), "--hardware", hardware, "--no-config",
            "--no-port-check", "--explain")  # fmt: skip
    assert r.code == 0, r.err
    assert "--ctx-sise" in r.out.split("findings  ", 1)[1].splitlines()[0]
    assert r.out.count("findings  none") == 2


def test_plan_group_refuses_a_bad_file_with_one_line_and_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "group.yaml"
    f.write_text("members:\n  - {id: a, model: /m.gguf, ctx: big}\n")
    r = cli("plan", "--group", str(f), "--no-config")
    assert r.code == 2
    assert r.err.strip() == (
        f"exedra-engine: error: {f}:2: members[0] (a): ctx: expected an integer, not a string"
    )


def test_plan_group_refuses_per_member_options_and_plan_still_needs_a_model(
    group_file: Path,
) -> None:
    r = cli("plan", "--group", str(group_file), "--ctx", "4096")
    assert r.code == 2 and "--ctx does not go with --group: a group file sets them" in r.err
    # an option that is no group-file field is not said to be one
    r = cli("plan", "--group", str(group_file), "--measure")
    assert r.code == 2 and "a group file sets them" not in r.err, r.err
    assert "--measure measures one model's plan on this machine" in r.err
    r = cli("plan", "--no-config")
    assert r.code == 2 and "required: --model, --kind" in r.err


def test_plan_group_explain_json_gives_the_shares_and_each_members_memory(
    group_file: Path, hardware: str
) -> None:
    r = cli("plan", "--group", str(group_file), "--hardware", hardware, "--no-config",
            "--no-port-check", "--explain", "--json")  # fmt: skip
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert [m["id"] for m in out["members"]] == ["chat", "side", "asr"]
    assert out["members"][0]["memory"] and out["members"][2]["memory"] == []
    assert [s["layer"] for s in out["members"][2]["sources"]][:1] == ["engine"]
    assert any(line.startswith("side: CPUs 1-2") for line in out["shares"])
    assert out["group"]["budget"] == sum(s["memory"] for s in out["group"]["shares"])


def test_env_is_a_mapping_or_key_value_strings_as_the_command_line_takes_them() -> None:
    text = "members:\n  - {id: a, model: /m.gguf, env: [A=1, B=x=y]}\n"
    (a,) = parse_group_file(text, "g.yaml").members
    assert a.constraints.extra_env == ("A=1", "B=x=y")


@pytest.mark.parametrize("value", ["1:20", "190:20:30", "0x_", "0b_", "-1:00", "0o"])
@pytest.mark.parametrize("field", ["ctx", "port", "threads", "weight"])
def test_yaml_1_1_integer_forms_get_one_line_naming_the_field(field: str, value: str) -> None:
    text = f"members:\n  - id: a\n    model: /m.gguf\n    {field}: {value}\n"
    with pytest.raises(ConfigError) as e:
        parse_group_file(text, "group.yaml")
    said = str(e.value)
    assert said.startswith(f"group.yaml:4: members[0] (a): {field}: expected an integer"), said
    assert "\n" not in said


@pytest.mark.parametrize(("value", "n"), [("0x1f", 31), ("0b11", 3), ("010", 8), ("1_000", 1000)])
def test_yaml_integers_in_other_bases_are_read(value: str, n: int) -> None:
    text = f"members:\n  - {{id: a, model: /m.gguf, ctx: {value}}}\n"
    assert parse_group_file(text, "group.yaml").members[0].constraints.ctx == n


def test_a_capability_typo_names_file_line_member_and_the_one_meant() -> None:
    text = "members:\n  - id: embed\n    model: /m.gguf\n    capabilities: [embedding]\n"
    with pytest.raises(ConfigError) as e:
        parse_group_file(text, "group.yaml")
    said = str(e.value)
    assert said.startswith("group.yaml:4: members[0] (embed): capabilities[0]: 'embedding'"), said
    assert "did you mean 'embeddings'?" in said
    asr = "members:\n  - {id: asr, model: /w.bin, kind: transcribe, capabilities: [llm]}\n"
    with pytest.raises(ConfigError, match="kind transcribe serves: asr"):
        parse_group_file(asr, "group.yaml")


def test_paths_mean_the_same_from_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    (home / "models").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    d = tmp_path / "conf"
    d.mkdir()
    f = d / "group.yaml"
    f.write_text(
        "members:\n"
        "  - {id: a, model: ~/models/a.gguf}\n"
        "  - {id: b, model: models/b.gguf, executor: ../bin/llama-server}\n"
        "  - {id: c, model: /abs/c.gguf}\n"
    )
    monkeypatch.chdir(tmp_path)  # not the file's directory
    a, b, c = load_group(f.relative_to(tmp_path)).unwrap()
    assert a.spec.path == f"{home}/models/a.gguf"
    assert b.spec.path == f"{d}/models/b.gguf"
    assert b.executor == f"{tmp_path}/bin/llama-server" and not a.executor
    assert c.spec.path == "/abs/c.gguf"


def test_plan_group_refuses_a_missing_model_naming_file_line_and_member(
    tmp_path: Path, hardware: str
) -> None:
    write_tiny_llama(tmp_path / "a.gguf")
    f = tmp_path / "group.yaml"
    f.write_text("members:\n  - {id: a, model: a.gguf}\n  - id: b\n    model: ~/nope/x.gguf\n")
    r = cli("plan", "--group", str(f), "--no-config")
    assert r.code == 2, r.out
    home = str(Path("~").expanduser())
    assert r.err.strip() == (
        f"exedra-engine: error: {f}:4: members[1] (b): model {home}/nope/x.gguf does not exist"
    )
    # For another host (a hardware file, or no port check) an absent model is planned without.
    r = cli("plan", "--group", str(f), "--no-config", "--hardware", hardware)
    assert r.code == 0, r.err


def test_a_whisper_file_at_the_default_kind_names_the_member_and_hints_the_kind(
    tmp_path: Path,
) -> None:
    write_tiny_whisper(tmp_path / "w.bin")
    f = tmp_path / "group.yaml"
    f.write_text("members:\n  - {id: asr, model: w.bin}\n")
    r = cli("plan", "--group", str(f), "--no-config")
    assert r.code == 2
    said = r.err.strip()
    assert said.startswith(f"exedra-engine: error: {f}:2: members[0] (asr): model "), said
    assert said.endswith("kind: transcribe?") and "\n" not in said


def test_a_fifo_group_file_is_refused_at_once(tmp_path: Path) -> None:
    import os
    import time

    fifo = tmp_path / "group.yaml"
    os.mkfifo(fifo)
    t = time.monotonic()
    for command in ("plan", "launch"):
        r = cli(command, "--group", str(fifo), "--no-config")
        assert r.code == 2 and "not a regular file (a FIFO)" in r.err, r.err
    assert time.monotonic() - t < 10


def test_a_group_executor_must_be_a_string_path() -> None:
    with pytest.raises(ConfigError, match=r"members\[0\] \(a\): executor: the value must be"):
        parse_group_file("members:\n  - {id: a, model: /m.gguf, executor: 3}\n", "g.yaml")
