"""`compactsim materialize FILE... --json`: rows, metrics, padding, and errors as the CLI prints them."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from compactsim.harness.cli import app
from compactsim.harness.core import metrics as M
from compactsim.scenarios.payloads import Call, build_response, continuing, run_result
from tests.conftest import EXAMPLES

runner = CliRunner()
EXAMPLE = EXAMPLES / "gym-0.7.0-transport-compacted-3call.json"
IMAGE = "media-e5214ee50da1954c70348ac5"


def _routed_group(tmp_path: Path) -> Path:
    lines = []
    for i, reward in enumerate([0.0, 1.0]):
        c1 = Call([1, 2, 3], [11, 12 + i], routes=[[[t, t + 1]] for t in range(4)] + [[[0, 1]]])
        c2 = Call([1, 2, 9, 11, 12 + i, 4], [21], boundary=True, routes=[[[t, t + 1]] for t in range(6)] + [[[0, 1]]])
        c3 = continuing(c2, [5], [31, 32], routes=[[[t, t + 1]] for t in range(9)] + [[[0, 1]]])
        response = build_response([c1, c2, c3], rollout_id=f"r{i}", rollout_index=i)
        lines.append(json.dumps(run_result(response, reward=reward)))
    path = tmp_path / "group.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_materialize_json_on_reference_example_prints_each_row():
    result = runner.invoke(app, ["materialize", str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["rows"] == [
        {
            "parent_index": 0,
            "logical_rollout_id": "rollout-demo-0",
            "physical_trace_id": "rollout-demo-0/trace-0",
            "input_length": 10,
            "mask_spans": [[3, 5], [8, 10]],
            "advantage": 0.0,
            "media_ids": [IMAGE],
            "sentinel_positions": [],
        },
        {
            "parent_index": 0,
            "logical_rollout_id": "rollout-demo-0",
            "physical_trace_id": "rollout-demo-0/trace-1",
            "input_length": 14,
            "mask_spans": [[11, 14]],
            "advantage": 0.0,
            "media_ids": [IMAGE],
            "sentinel_positions": [],
        },
    ]
    assert out["metrics"][M.NUM_PHYSICAL_ROWS] == 2
    assert out["metrics"][M.NUM_SPLIT_ROLLOUTS] == 1
    assert out["metrics"][M.TOTAL_NUM_TOKENS] == 24
    assert out["metrics"][M.SCHEDULER_STEP_INCREMENT] == 1


def test_materialize_json_shows_advantages_padding_and_sentinels(tmp_path):
    path = _routed_group(tmp_path)
    result = runner.invoke(app, ["materialize", str(path), "--json", "--num-generations", "2", "--dp-size", "3"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["rows"]
    assert [r["parent_index"] for r in rows] == [0, 0, 1, 1, -1, -1]
    assert [r["advantage"] for r in rows] == [-1.0, -1.0, 1.0, 1.0, 0.0, 0.0]
    assert [r["sentinel_positions"] for r in rows] == [[4], [], [4], [], [], []]
    assert [r["mask_spans"] for r in rows[:2]] == [[[3, 5]], [[6, 7], [8, 10]]]
    assert rows[4] == {
        "parent_index": -1,
        "logical_rollout_id": None,
        "physical_trace_id": None,
        "input_length": 0,
        "mask_spans": [],
        "advantage": 0.0,
        "media_ids": [],
        "sentinel_positions": [],
    }


def test_materialize_table_lists_rows_for_a_person(tmp_path):
    result = runner.invoke(app, ["materialize", str(_routed_group(tmp_path))])
    assert result.exit_code == 0, result.output
    assert "r0/trace-1" in result.stdout and "[3,5)" in result.stdout


def test_materialize_reports_a_contract_error_as_json_and_exits_2(tmp_path):
    result = runner.invoke(app, ["materialize", str(_routed_group(tmp_path)), "--json", "--num-generations", "3"])
    assert result.exit_code == 2
    err = json.loads(result.stdout)
    assert err["error_code"] == "incomplete_group"
    assert "group 'group-0' has 2 rollout(s)" in err["message"]


def test_materialize_of_one_rollout_given_twice_is_a_duplicate():
    result = runner.invoke(app, ["materialize", str(EXAMPLE), str(EXAMPLES / "gym-pr2870-transport-compacted-3call.json")])
    assert result.exit_code == 2
    assert "duplicate_logical_rollout_id" in result.output
