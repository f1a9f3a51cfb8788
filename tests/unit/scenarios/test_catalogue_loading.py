"""The named catalogue: loading, selection by name or tag, and file errors that name file and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from compactsim.harness.core.errors import ConfigError
from compactsim.scenarios.catalogue import Catalogue, default_catalogue, dump_scenario, get_scenario, list_scenarios, load_catalogue, load_file
from compactsim.scenarios.model import Scenario


def test_bundled_catalogue_has_at_least_thirty_unique_scenarios_with_one_line_purposes():
    cat = default_catalogue()
    assert len(cat) >= 30
    assert len(set(cat.names)) == len(cat.names)
    assert all(s.purpose and "\n" not in s.purpose for s in cat)
    assert list_scenarios() == cat.scenarios and get_scenario("no-compaction").name == "no-compaction"


def test_every_bundled_scenario_round_trips_through_its_yaml_dump():
    for s in default_catalogue():
        (again,) = yaml.safe_load(dump_scenario(s))["scenarios"]
        assert Scenario.model_validate(again) == s, s.name


def test_select_takes_names_and_tags_once_each_in_catalogue_order():
    cat = default_catalogue()
    chosen = cat.select(["reference", "no-compaction", "pr-validation-no-compaction"])
    assert [s.name for s in chosen] == ["no-compaction", "pr-validation-no-compaction", "pr-validation-image-compaction-k2"]
    assert cat.select([]) == cat.scenarios
    assert "mutation" in cat.tags and "no-compaction" in cat


def test_unknown_names_are_config_errors_with_close_matches():
    with pytest.raises(ConfigError) as info:
        default_catalogue().get("image-compaction-k9")
    assert info.value.code == "invalid_argument"
    assert "unknown scenario 'image-compaction-k9'" in str(info.value)
    with pytest.raises(ConfigError, match="no scenario or tag 'zzz'"):
        default_catalogue().select(["zzz"])


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("scenarios:\n  - name: ok\n    purpose: fine\n  - name: bad\n    purpose: p\n    group_size: 0\n",
         "6:17: field $.scenarios[1].group_size: Input should be greater than or equal to 1"),
        ("scenarios:\n  - name: x\n    purpose: p\n    script: {generate: {turns: 2, colour: red}}\n",
         "4:35: field $.scenarios[0].script.generate.colour: Extra inputs are not permitted"),
        ("scenarios:\n  - name: x\n    purpose: p\n    rollouts: [{index: 0, compaction: bogus}]\n",
         "4:39: field $.scenarios[0].rollouts[0].compaction: Value error, policy preset 'bogus': unknown policy 'bogus'; "
         "examples: identity, recency-images-k1, recency-images-k2, recency-images-k3, recency-images-k2-chunked3, "
         "recency-images-k2-nomarker"),
        ("scenarios: [1, 2\n", "2:1: not valid YAML: expected ',' or ']', but got '<stream end>'"),
        ("- name: x\n", "1:1: field $: expected a mapping with one key 'scenarios' holding a list"),
    ],
)
def test_a_bad_file_is_a_config_error_naming_file_line_column_and_field(tmp_path, text, message):
    path = _write(tmp_path, "bad.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_file(path)
    assert info.value.code == "invalid_config"
    assert str(info.value) == f"invalid_config: {path}:{message}"


def test_duplicate_names_across_files_and_empty_directories_are_refused(tmp_path):
    _write(tmp_path, "a.yaml", "scenarios:\n  - {name: twin, purpose: p}\n")
    _write(tmp_path, "b.yaml", "scenarios:\n  - {name: twin, purpose: q}\n")
    with pytest.raises(ConfigError, match="scenario name 'twin' is already defined in .*a.yaml"):
        load_catalogue(tmp_path)
    with pytest.raises(ConfigError, match="no \\*.yaml scenario files"):
        load_catalogue(tmp_path / "missing")
    with pytest.raises(ConfigError, match="nope.yaml: file not found"):
        load_file(tmp_path / "nope.yaml")


def test_a_directory_of_files_loads_in_file_name_order(tmp_path):
    _write(tmp_path, "20-b.yaml", "scenarios:\n  - {name: second, purpose: p, tags: [x]}\n")
    _write(tmp_path, "10-a.yaml", "scenarios:\n  - {name: first, purpose: p}\n")
    cat = load_catalogue(tmp_path)
    assert isinstance(cat, Catalogue) and cat.names == ("first", "second")
    assert cat.with_tag("x")[0].name == "second" and cat.sources["first"].endswith("10-a.yaml")
