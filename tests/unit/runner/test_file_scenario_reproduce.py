"""A failing scenario from a YAML file: its reproduction command names the file as it was given, so it reruns.

Its name alone selects nothing (it is not in the catalogue). Catalogue scenarios keep their names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.runner import (RunOptions, prepare_scenario, resolve_scenarios, scenario_reproduce,
                                       scenario_source)

runner = CliRunner()

#: A scenario that succeeds but declares an error, so its run fails on `scenario.declared_verdict`.
WRONG_EXPECT = ('scenarios:\n  - name: my-wrong-expect\n    purpose: "A passing scenario whose expected verdict is '
                'wrong."\n    script: {generate: {turns: 2}}\n    expect: {verdict: error, code: turn_order}\n')
REPRODUCE = "compactsim run wrongexpect.yaml --seed 3"


def test_a_failing_file_scenario_prints_a_reproduce_line_that_reruns_it(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "wrongexpect.yaml").write_text(WRONG_EXPECT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "wrongexpect.yaml", "--seed", "3", "--out", "a"])
    assert result.exit_code == 1, result.output
    assert f"  reproduce: {REPRODUCE}" in result.stdout.splitlines()
    # the run produced what the oracle expects; the headline leads with the scenario's own wrong expect
    assert ("FAIL my-wrong-expect: the scenario declares error turn_order, the oracle expects success, observed success, "
            "1 finding(s)") in result.stdout.splitlines()
    summary = json.loads((tmp_path / "a" / "summary.json").read_text(encoding="utf-8"))
    (record,) = summary["scenarios"]
    assert record["reproduce"] == REPRODUCE
    assert [f["reproduce"] for f in record["findings"]] == [REPRODUCE]
    assert f"<code class='repro'>{REPRODUCE}</code>" in (tmp_path / "a" / "report.html").read_text(encoding="utf-8")
    again = runner.invoke(app, [*REPRODUCE.split()[1:], "--out", "b"])  # the printed line, as a person would run it
    assert again.exit_code == 1, again.output
    assert f"  reproduce: {REPRODUCE}" in again.stdout.splitlines()


def test_the_file_is_named_as_given_and_survives_a_seed_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "wrongexpect.yaml").write_text(WRONG_EXPECT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    (scenario,) = resolve_scenarios(["./wrongexpect.yaml"])
    assert scenario_source(scenario) == "./wrongexpect.yaml"
    prepared = prepare_scenario(scenario, RunOptions(seed=7, max_steps=1))
    assert scenario_reproduce(prepared, RunOptions(seed=7)) == "compactsim run ./wrongexpect.yaml --seed 7"
    assert prepared.to_data() == {**scenario.to_data(), "seed": 7}  # the data holds no trace of the file


def test_catalogue_scenarios_are_reproduced_by_name():
    (scenario,) = resolve_scenarios(["no-compaction"])
    assert scenario_source(scenario) is None
    assert scenario_reproduce(prepare_scenario(scenario, RunOptions(seed=3)), RunOptions(seed=3)) == (
        "compactsim run no-compaction --seed 3")


def test_replaying_a_file_scenarios_failure_finds_the_same_findings_and_names_the_file(tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch):
    """`replay` re-ran the saved scenario without its file: every finding's reproduce named the scenario alone (a
    command that exits 2), so the same finding read as "findings differ from saved" (CLI probe)."""
    (tmp_path / "wrongexpect.yaml").write_text(WRONG_EXPECT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert runner.invoke(app, ["run", "wrongexpect.yaml", "--seed", "3", "--out", "a"]).exit_code == 1
    saved = json.loads((tmp_path / "a" / "scenarios" / "my-wrong-expect" / "run.json").read_text(encoding="utf-8"))
    assert saved["source"] == "wrongexpect.yaml"
    result = runner.invoke(app, ["replay", "a", "--json"])
    assert result.exit_code == 1, result.output
    (replayed,) = json.loads(result.stdout)
    assert replayed["same_findings"] is True
    assert [f["reproduce"] for f in replayed["findings"]] == [REPRODUCE]
