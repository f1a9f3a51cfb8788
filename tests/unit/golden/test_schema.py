"""The shipped JSON Schemas: valid Draft 2020-12 documents, loaded by name, and the minimal README example passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.golden.schema import SCHEMA_NAMES, load_schema, schema_text, validator

README = Path(__file__).resolve().parents[3] / "README.md"


def readme_example_line() -> dict:
    """The minimal rows-dump line of the README's "Golden files for any trainer" section."""
    section = README.read_text(encoding="utf-8").split("## Golden files for any trainer", 1)[1]
    block = section.split("```jsonl\n", 1)[1].split("```", 1)[0]
    (line,) = block.strip().splitlines()
    return json.loads(line)


@pytest.mark.parametrize("name", SCHEMA_NAMES)
def test_schema_is_a_valid_draft_2020_12_document_with_a_title(name):
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"].startswith("compactsim ")
    assert json.loads(schema_text(name)) == schema


def test_schema_names_are_the_shipped_files():
    from importlib import resources

    shipped = sorted(p.name for p in resources.files("compactsim.harness.golden.schemas").iterdir() if p.name.endswith(".json"))
    assert shipped == sorted(f"{n}.schema.json" for n in SCHEMA_NAMES)


def test_unknown_schema_name_is_a_usage_error():
    with pytest.raises(ConfigError) as info:
        schema_text("rows")
    assert info.value.code == "invalid_argument"
    assert "unknown schema 'rows'; expected one of rows-dump, metrics-dump" in info.value.detail


def test_readme_minimal_rows_dump_line_is_valid():
    line = readme_example_line()
    assert list(validator("rows-dump").iter_errors(line)) == []
    assert sorted(line) == ["advantages", "generation_logprobs", "input_ids", "logical_rollout_id", "parent_index",
                            "physical_trace_id", "scenario", "step", "token_mask"]


def test_rows_dump_schema_accepts_an_error_line_and_refuses_a_bare_one():
    v = validator("rows-dump")
    assert v.is_valid({"scenario": "s", "step": 0, "error": {"code": "incomplete_group", "rollout_id": None,
                                                             "turn_id": None}})
    assert not v.is_valid({"scenario": "s", "step": 0, "error": {}})
    assert not v.is_valid({"scenario": "s", "step": 0})


def test_schemas_dump_parsers_and_golden_readers_do_not_load_torch():
    import subprocess
    import sys

    code = ("import sys, compactsim.harness.golden as g; g.load_schema('rows-dump'); g.parse_rows_dump(''); g.read_golden; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
