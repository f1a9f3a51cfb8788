"""`compactsim rollout` writes readable evidence and ground-truth files and a summary."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from harness.cli import app

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


def test_rollout_command_writes_evidence_ground_truth_and_summary(tmp_path):
    result = CliRunner().invoke(app, ["rollout", "--policy", "recency-images-k2", "--turns", "6", "--seed", "3",
                                      "--out", str(tmp_path), "--rollouts", "2", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["rollout_id"], r["status"], r["num_calls"], r["boundary_turns"], r["traces"], r["reward"]) for r in rows] == [
        ("rollout-3-0", "completed", 6, [4, 5, 6], [[1, 2, 3], [4], [5], [6]], 1.0),
        ("rollout-3-1", "completed", 6, [4, 5, 6], [[1, 2, 3], [4], [5], [6]], 0.0),
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rollout-3-0.ground_truth.json", "rollout-3-0.result.json",
        "rollout-3-1.ground_truth.json", "rollout-3-1.result.json", "summary.json"]
    evidence = json.loads((tmp_path / "rollout-3-0.result.json").read_text())
    assert evidence["response"]["context_compaction_contract"]["schema_version"] == 3
    truth = json.loads((tmp_path / "rollout-3-0.ground_truth.json").read_text())
    assert truth["format"] == "compactsim.ground_truth"
    assert "[1, 2, 3" in (tmp_path / "rollout-3-0.ground_truth.json").read_text()  # token lists stay on one line


def test_rollout_command_table_names_boundaries_and_traces(tmp_path):
    result = CliRunner().invoke(app, ["rollout", "--policy", "summary-at3", "--turns", "4", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "[1,2] [3,4]" in result.stdout
    assert "wrote 1 rollout(s)" in result.stdout


def test_rollout_command_output_is_identical_for_the_same_seed(tmp_path):
    for name in ("a", "b"):
        CliRunner().invoke(app, ["rollout", "--turns", "3", "--seed", "9", "--out", str(tmp_path / name), "--workers", "1"])
    assert (tmp_path / "a" / "rollout-9-0.result.json").read_bytes() == (tmp_path / "b" / "rollout-9-0.result.json").read_bytes()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "bogus"], "unknown policy 'bogus'"),
        (["--turns", "0"], "--turns=0: expected >= 1"),
        (["--flavour", "gym-9"], "--flavour='gym-9'"),
        (["--executor", "dask"], "--executor='dask'"),
        (["--reward-pattern", "x"], "--reward-pattern='x'"),
        (["--seed", "-1"], "invalid_seed"),
    ],
)
def test_rollout_command_rejects_bad_options_with_exit_2(tmp_path, args, message):
    result = CliRunner().invoke(app, ["rollout", "--out", str(tmp_path), *args])
    assert result.exit_code == 2
    assert message in result.output
