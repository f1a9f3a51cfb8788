"""`compactsim scenarios list|show`: the catalogue for people and for machines."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.scenarios.catalogue import default_catalogue


def test_list_json_names_every_scenario_with_tags_purpose_and_expected_verdict():
    result = CliRunner().invoke(app, ["scenarios", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == len(default_catalogue()) >= 30
    by_name = {r["name"]: r for r in rows}
    assert by_name["mutation-ghost-media"]["expected"] == "error: unknown_media_asset @ turn 4"
    assert by_name["no-compaction"] == {
        "name": "no-compaction", "tags": ["baseline", "smoke", "images"],
        "purpose": "Identity policy: every call extends the previous context, so each rollout is one row (the baseline).",
        "expected": "success", "steps": 1, "mode": "scripted"}


def test_list_filters_by_tag_and_renders_a_table():
    result = CliRunner().invoke(app, ["scenarios", "list", "--tag", "reference"])
    assert result.exit_code == 0, result.output
    assert "pr-validation-no-compaction" in result.stdout and "2 scenarios" in result.stdout
    assert "mutation-ghost-media" not in result.stdout


def test_show_prints_the_yaml_entry_and_rollout_ids():
    result = CliRunner().invoke(app, ["scenarios", "show", "uneven-trace-counts"])
    assert result.exit_code == 0, result.output
    assert "expected: success" in result.stdout
    assert "rollouts per step: s0-g0-r0, s0-g0-r1, s0-g0-r2" in result.stdout
    assert "- name: uneven-trace-counts" in result.stdout


def test_show_json_resolves_the_trainer_config():
    result = CliRunner().invoke(app, ["scenarios", "show", "multi-group-padding", "--json"])
    info = json.loads(result.stdout)
    assert info["trainer"]["policy"]["dp_size"] == 2 and info["trainer"]["grpo"]["num_prompts_per_step"] == 2
    assert info["scenario"]["name"] == "multi-group-padding" and info["source"].endswith("30-groups.yaml")


def test_unknown_scenario_or_tag_exits_2_with_the_error_code():
    result = CliRunner().invoke(app, ["scenarios", "show", "no-such-thing", "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error_code"] == "invalid_argument"
    result = CliRunner().invoke(app, ["scenarios", "list", "--tag", "nope"])
    assert result.exit_code == 2 and "no scenario or tag 'nope'" in result.output
