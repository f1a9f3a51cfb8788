"""`compactsim plan`: tables, JSON, exit codes, and every planner error reachable from the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.scenarios.mutations import MUTATIONS, MutationNotApplicable
from compactsim.scenarios.payloads import compacted_three_calls, run_result
from tests.conftest import EXAMPLES

runner = CliRunner()
EXAMPLE = EXAMPLES / "gym-0.7.0-transport-compacted-3call.json"


def test_plan_json_on_reference_example_gives_traces_1_2_and_3():
    result = runner.invoke(app, ["plan", "--json", str(EXAMPLE)])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["rollout_id"] == "rollout-demo-0"
    assert plan["path"] == "physical"
    assert [t["turn_ids"] for t in plan["physical_traces"]] == [[1, 2], [3]]
    assert [t["media_ids"] for t in plan["physical_traces"]] == [["media-e5214ee50da1954c70348ac5"]] * 2
    assert [t["start_reason"] for t in plan["physical_traces"]] == ["rollout_start", "declared_boundary"]
    assert plan["physical_traces"][0] == {
        "trace_id": "rollout-demo-0/trace-0",
        "turn_ids": [1, 2],
        "media_ids": ["media-e5214ee50da1954c70348ac5"],
        "start_reason": "rollout_start",
        "num_tokens": 10,
        "num_sampled_tokens": 4,
    }
    assert plan["violations"] == []


def test_plan_table_lists_each_trace():
    result = runner.invoke(app, ["plan", str(EXAMPLE)])
    assert result.exit_code == 0
    assert "declared_boundary" in result.stdout and "rollout-demo-0" in result.stdout


def test_plan_reads_json_lists_and_json_lines(tmp_path: Path):
    payloads = [run_result(compacted_three_calls()), compacted_three_calls("pr2870")]
    listing = tmp_path / "list.json"
    listing.write_text(json.dumps(payloads))
    lines = tmp_path / "lines.jsonl"
    lines.write_text("\n".join(json.dumps(p) for p in payloads) + "\n")
    for path in (listing, lines):
        result = runner.invoke(app, ["plan", "--json", str(path)])
        assert result.exit_code == 0, result.output
        plans = json.loads(result.stdout)
        assert [[t["turn_ids"] for t in p["physical_traces"]] for p in plans] == [[[1, 2], [3]]] * 2


def test_plan_reports_bad_json_line_with_its_number(tmp_path: Path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(compacted_three_calls()) + "\n{not json\n")
    result = runner.invoke(app, ["plan", "--json", str(path)])
    assert result.exit_code == 2
    out = json.loads(result.stdout)
    assert out == {"error_code": "invalid_argument", "file": str(path), "line": 2, "column": 2, "field": "$",
                   "message": "not valid JSON: Expecting property name enclosed in double quotes"}


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_every_planner_error_exits_2_with_its_json(mutation, tmp_path: Path):
    path = tmp_path / "payload.json"
    try:
        bad = mutation.apply(compacted_three_calls())
    except MutationNotApplicable:
        pytest.skip(f"{mutation.name} does not apply to the three-call payload (its catalogue scenario runs it)")
    path.write_text(json.dumps(bad))
    result = runner.invoke(app, ["plan", "--json", str(path)])
    assert result.exit_code == 2
    out = json.loads(result.stdout)
    assert set(out) == {"error_code", "rollout_id", "turn_id", "message"}
    assert out["error_code"] == mutation.code
    assert out["rollout_id"] == "rollout-0"
    assert mutation.code in out["message"]
    assert "Traceback" not in result.output


def test_plan_error_without_json_prints_one_readable_line(tmp_path: Path):
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(MUTATIONS[0].apply(compacted_three_calls())))
    result = runner.invoke(app, ["plan", str(path)])
    assert result.exit_code == 2
    assert "error: append_declaration_mismatch (rollout 'rollout-0', turn 3)" in result.stderr
    assert "Traceback" not in result.output


def test_no_strict_lists_violations_and_exits_0(tmp_path: Path):
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(MUTATIONS[0].apply(compacted_three_calls())))
    result = runner.invoke(app, ["plan", "--json", "--no-strict", str(path)])
    assert result.exit_code == 0
    plan = json.loads(result.stdout)
    assert [v["code"] for v in plan["violations"]] == ["append_declaration_mismatch"]


def test_missing_file_is_a_usage_error(tmp_path: Path):
    result = runner.invoke(app, ["plan", "--json", str(tmp_path / "nope.json")])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error_code"] == "invalid_argument"


@pytest.mark.parametrize("command", ["plan", "materialize"])
def test_a_result_that_names_no_rollout_is_placed_by_file_and_position(tmp_path: Path, command: str):
    """A JSONL line holding a list (or a result without a response) named neither file nor line: in a long file of
    several, nothing said where to look."""
    good = json.dumps(json.loads(EXAMPLE.read_text()))
    path = tmp_path / "results.jsonl"
    path.write_text(f"{good}\n[1]\n{good}\n")
    result = runner.invoke(app, [command, "--json", str(path)])
    assert result.exit_code == 2, result.output
    body = json.loads(result.stdout)
    assert (body["error_code"], body["rollout_id"]) == ("malformed_payload", None)
    assert f"{path}: result 2 of 3: a result must be a JSON object, got list" in body["message"]
