"""`exedra-engine config --schema`: a JSON Schema of override files made from the structs the
loader decodes into; it accepts what the loader accepts and rejects what it rejects (issue 13).
The property that the two agree on generated documents is properties/test_schema_props.py."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from exedra_engine._core.config.parse import config_from_yaml
from exedra_engine._core.config.schema import config_schema
from exedra_engine._core.executors.kinds import supported_kinds
from exedra_engine.cli import main
from tests.project.test_docs import PAGES, ROOT, blocks

PUBLISHED = ROOT / "docs" / "schema" / "engine-overrides.schema.json"


def valid(text: str) -> bool:
    v = jsonschema.Draft202012Validator(config_schema())
    return v.is_valid(yaml.safe_load(text))


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(config_schema())


def test_the_engine_kinds_are_an_enum() -> None:
    kinds = config_schema()["$defs"]["Kind"]["enum"]
    assert kinds == [k.value for k in supported_kinds()]
    assert {"llama", "transcribe"} <= set(kinds)


def test_unknown_keys_are_rejected_at_every_level() -> None:
    s = config_schema()["$defs"]
    assert s["Config"]["additionalProperties"] is False
    assert s["Override"]["additionalProperties"] is False
    for text in ("global: {}\n", "engines:\n  llama: {argz: []}\n", "models:\n  q: {en: {}}\n"):
        assert not valid(text)
        assert config_from_yaml(text, "x.yaml").failure()


def test_config_schema_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "--schema"]) == 0
    assert json.loads(capsys.readouterr().out) == config_schema()


def test_the_published_schema_is_current() -> None:
    # docs/schema/ is copied into the documentation site as it is; regenerate it with
    #   exedra-engine config --schema > docs/schema/engine-overrides.schema.json
    assert json.loads(PUBLISHED.read_text()) == config_schema()


@pytest.mark.parametrize(
    "page", [p for p in PAGES if blocks(p, "yaml")], ids=lambda p: str(p.relative_to(ROOT))
)
def test_the_schema_accepts_every_yaml_example_in_the_docs(page: Path) -> None:
    for body in blocks(page, "yaml"):
        assert config_from_yaml(body, str(page)).unwrap() is not None
        jsonschema.validate(yaml.safe_load(body), config_schema())


@pytest.mark.parametrize(
    "text",
    [
        # wrong types
        "env:\n  OMP_NUM_THREADS: 4\n",
        "env:\n  X: yes\n",
        "env:\n  X: 1.5\n",
        "env:\n  X: null\n",
        "env: [A, B]\n",
        "engines:\n  llama:\n    args: --ctx-size 4096\n",
        "engines:\n  llama:\n    args: [--ctx-size, 4096]\n",
        "engines:\n  llama:\n    args: [[nested]]\n",
        "engines:\n  llama:\n    env: [A=1]\n",
        "models:\n  qwen: [--ctx-size]\n",
        "models: [qwen]\n",
        "[env]\n",
        "just text\n",
        "env:\n  1: x\n",
        # unknown keys
        "global:\n  env: {}\n",
        "engines:\n  llama:\n    argz: []\n",
        "models:\n  qwen:\n    flags: []\n",
        # unknown kinds
        "engines:\n  vllm:\n    args: []\n",
        "engines:\n  Llama:\n    args: []\n",
        # names and text no process can take
        "env:\n  '': x\n",
        "env:\n  A=B: x\n",
        'env:\n  A: "x\\0y"\n',
        'models:\n  "q\\0": {}\n',
    ],
)
def test_the_schema_rejects_what_the_loader_rejects(text: str) -> None:
    assert config_from_yaml(text, "bad.yaml").failure()
    assert not valid(text)


@pytest.mark.parametrize(
    "text",
    ["", "# only a comment\n", "env:\n", "engines:\n  llama:\n", "models:\n  qwen:\n    args:\n"],
)
def test_empty_documents_sections_and_fields_are_accepted_by_both(text: str) -> None:
    assert config_from_yaml(text, "ok.yaml").unwrap() is not None
    assert valid(text)


@pytest.mark.parametrize(
    "text",
    [
        "env:\n  A: x\n  A: y\n",  # a duplicate key: JSON Schema sees the loaded mapping
        "env: &e {A: x}\nengines:\n  llama:\n    <<: *e\n",  # a merge key
        "env:\n  A: !!python/name:os.system x\n",  # a tag outside the core schema
    ],
)
def test_what_only_the_loader_sees(text: str) -> None:
    # Documented in exedra_engine._core.config.schema: the loader refuses these, the schema cannot.
    assert config_from_yaml(text, "x.yaml").failure()
