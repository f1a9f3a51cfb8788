"""A scenario file whose fields do not validate: one line FILE:LINE:COLUMN: field F: problem, exit 2.

With ``--json``, the six keys every bad input file gets (``error_code``, ``file``, ``line``,
``column``, ``field``, ``message``). The place is the offending value, an unknown key's key, or the
mapping that lacks a required field.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.scenarios.catalogue import ScenarioFileError, load_file

runner = CliRunner()

VALID = 'scenarios:\n  - name: my-scenario\n    purpose: "A scenario."\n    script: {generate: {turns: 2}}\n'

#: file name -> (text, line, column, field, message)
CASES: dict[str, tuple[str, int, int, str, str]] = {
    "type.yaml": (VALID + "    steps: many\n", 5, 12, "$.scenarios[0].steps", "Input should be a valid integer"),
    "unknown.yaml": (VALID + "oops: 1\n", 5, 1, "$.oops",
                     "unknown key 'oops': a scenario file is a mapping with one key 'scenarios' holding a list"),
    "unknown-field.yaml": (VALID + "    stepz: 2\n", 5, 5, "$.scenarios[0].stepz", "Extra inputs are not permitted"),
    "range.yaml": (VALID + "    group_size: 0\n", 5, 17, "$.scenarios[0].group_size",
                   "Input should be greater than or equal to 1"),
    "missing.yaml": ("scenarios:\n  - name: my-scenario\n    tags: [smoke]\n", 2, 5, "$.scenarios[0].purpose",
                     "Field required"),
    # a trainer key is named at the key (it used to be the scenario's mapping, 2:5), a bad value at the value
    "trainer-key.yaml": (VALID + "    trainer: {policy: {nonsense: 1}}\n", 5, 24, "$.scenarios[0].trainer.policy.nonsense",
                         "Extra inputs are not permitted"),
    "trainer-type.yaml": (VALID + "    trainer:\n      policy:\n        dp_size: two\n", 7, 18,
                          "$.scenarios[0].trainer.policy.dp_size",
                          "Input should be a valid integer, unable to parse string as an integer"),
    # beyond an int32 every model call is refused: the scenario's error, never a finding (CLI probe)
    "max-tokens.yaml": (VALID + "    max_output_tokens: 2147483648\n", 5, 24, "$.scenarios[0].max_output_tokens",
                        "Input should be less than or equal to 2147483647"),
    "rewards-outside.yaml": (VALID + "    group_size: 2\n    rewards: {by_index: {7: 5.0}}\n", 2, 5, "$.scenarios[0]",
                             "Value error, rewards.by_index names rollout indices [7] outside the group (group_size=2); "
                             "its rewards would never be given"),
    "no-scenarios.yaml": ("# nothing\n{}\n", 2, 1, "$.scenarios",
                          "Field required: a scenario file is a mapping with one key 'scenarios' holding a list"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_field_error_is_one_line_naming_file_line_column_and_field(name: str, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    text, line, column, field, message = CASES[name]
    (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", name, "--out", "out"])
    assert (result.exit_code, result.stdout, result.stderr) == (
        2, "", f"error: invalid_config: {name}:{line}:{column}: field {field}: {message}\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", list(CASES))
def test_a_field_error_with_json_is_the_six_key_object(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    text, line, column, field, message = CASES[name]
    (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "--json", name, "--out", "out"])
    assert (result.exit_code, result.stderr) == (2, "")
    assert json.loads(result.stdout) == {"error_code": "invalid_config", "file": name, "line": line, "column": column,
                                         "field": field, "message": message}


def test_load_file_raises_the_same_error_and_it_survives_pickling(tmp_path: Path):
    path = tmp_path / "type.yaml"
    path.write_text(CASES["type.yaml"][0], encoding="utf-8")
    with pytest.raises(ScenarioFileError) as info:
        load_file(path)
    err = info.value
    assert (err.code, err.source, err.line, err.column, err.field) == ("invalid_config", str(path), 5, 12,
                                                                       "$.scenarios[0].steps")
    again = pickle.loads(pickle.dumps(err))
    assert (type(again), str(again), again.to_json()) == (ScenarioFileError, str(err), err.to_json())


def test_several_problems_name_the_first_and_count_the_rest(tmp_path: Path):
    path = tmp_path / "multi.yaml"
    path.write_text(VALID + "    group_size: 0\n    steps: many\n", encoding="utf-8")
    with pytest.raises(ScenarioFileError) as info:
        load_file(path)
    assert str(info.value) == (f"invalid_config: {path}:5:17: field $.scenarios[0].group_size: Input should be "
                               "greater than or equal to 1 (and 1 more problem(s))")


def test_a_name_used_twice_in_one_file_is_at_the_second_name(tmp_path: Path):
    path = tmp_path / "twins.yaml"
    path.write_text("scenarios:\n  - {name: twin, purpose: p}\n  - {name: twin, purpose: q}\n", encoding="utf-8")
    with pytest.raises(ScenarioFileError) as info:
        load_file(path)
    assert str(info.value) == (f"invalid_config: {path}:3:12: field $.scenarios[1].name: the name 'twin' is already "
                               "used by scenarios[0] of this file; names are unique")
