"""`compactsim rollout` writes readable evidence and ground-truth files and a summary."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
runner = CliRunner()


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
        (["--turns", "0"], "Invalid value for '--turns'"),  # Typer's bounds: 1..16
        (["--flavour", "gym-9"], "--flavour='gym-9'"),
        (["--executor", "dask"], "--executor='dask'"),
        (["--reward-pattern", "x"], "--reward-pattern='x'"),
        (["--reward-pattern", "1,,2"], "--reward-pattern='1,,2': item 2 is empty"),  # was read as 1,2
        (["--reward-pattern", " , "], "--reward-pattern: expected at least one number"),
        (["--image-pattern", "reordered", "--images-per-observation", "1"],
         "--images-per-observation=1 needs to be 2 or more"),  # the scenario model refuses it too
        (["--seed", "-1"], "Invalid value for '--seed'"),
    ],
)
def test_rollout_command_rejects_bad_options_with_exit_2(tmp_path, args, message):
    result = CliRunner().invoke(app, ["rollout", "--out", str(tmp_path), *args])
    assert result.exit_code == 2
    assert message in result.output


# ---------------------------------------------------------------------------------------------- --scenario


def _written(out, rid: str) -> tuple[dict, dict]:
    return (json.loads((out / f"{rid}.result.json").read_text(encoding="utf-8")),
            json.loads((out / f"{rid}.ground_truth.json").read_text(encoding="utf-8")))


def test_rollout_scenario_writes_one_step_whose_results_plan_to_the_ground_truth_segments(tmp_path):
    from compactsim.harness.pipeline.planner import plan_rollout

    result = CliRunner().invoke(app, ["rollout", "--scenario", "image-compaction-k2-rolling", "--seed", "3",
                                      "--out", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [(r["rollout_id"], r["status"], r["num_calls"], r["boundary_turns"], r["traces"], r["reward"]) for r in rows] == [
        ("s0-g0-r0", "completed", 5, [4, 5], [[1, 2, 3], [4], [5]], 1.0),
        ("s0-g0-r1", "completed", 5, [4, 5], [[1, 2, 3], [4], [5]], 0.0),
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "s0-g0-r0.ground_truth.json", "s0-g0-r0.result.json",
        "s0-g0-r1.ground_truth.json", "s0-g0-r1.result.json", "summary.json"]
    evidence, truth = _written(tmp_path, "s0-g0-r0")
    assert (truth["rollout"]["group_id"], truth["rollout"]["seed"]) == ("s0-g0", 6025329246877092447)
    plan = plan_rollout(evidence)
    segments = truth["expected"]["segments_declared"]
    assert [list(t.turn_ids) for t in plan.traces] == [s["turn_ids"] for s in segments] == [[1, 2, 3], [4], [5]]
    assert [t.to_json() for t in plan.traces] == [{k: s[k] for k in t.to_json()} for t, s in zip(plan.traces, segments)]
    assert [t.trace_id for t in plan.traces] == ["s0-g0-r0/trace-0", "s0-g0-r0/trace-1", "s0-g0-r0/trace-2"]


def test_rollout_scenario_step_collects_what_the_scenario_collects_at_that_step(tmp_path):
    from compactsim.scenarios.catalogue import get_scenario
    from compactsim.scenarios.execute import collect_step

    result = CliRunner().invoke(app, ["rollout", "--scenario", "scripted-three-steps", "--step", "2",
                                      "--out", str(tmp_path), "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "wrote 4 rollout(s)" in result.stdout
    ids = ["s2-g0-r0", "s2-g0-r1", "s2-g1-r0", "s2-g1-r1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"{rid}.result.json" for rid in ids] + [f"{rid}.ground_truth.json" for rid in ids] + ["summary.json"])
    # no --seed: the scenario's own seed, exactly the rollouts of its step 2
    expected = collect_step(get_scenario("scripted-three-steps"), 2)
    assert [c.rollout_id for c in expected] == ids
    for c in expected:
        assert _written(tmp_path, c.rollout_id) == (c.result, c.ground_truth)


def test_rollout_scenario_names_the_batch_edit_the_files_do_not_show(tmp_path):
    result = CliRunner().invoke(app, ["rollout", "--scenario", "mutation-ghost-media", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert ("note: mutation ghost_media edits s0-g0-r1 before the trainer receives it; "
            "these files hold the rollouts as the agents emitted them") in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "identity"], "options --scenario and --policy are mutually exclusive"),
        (["--turns", "3"], "options --scenario and --turns are mutually exclusive"),
        (["--policy", "identity", "--turns", "3"], "options --scenario and --policy/--turns are mutually exclusive"),
        (["--rollouts", "2"], "options --scenario and --rollouts are mutually exclusive"),
    ],
)
def test_rollout_scenario_refuses_rollout_options_with_exit_2(tmp_path, args, message):
    result = CliRunner().invoke(app, ["rollout", "--scenario", "no-compaction", "--out", str(tmp_path / "o"), *args])
    assert result.exit_code == 2
    assert f"usage error: {message}: the scenario defines its rollouts" in result.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "scripted-three-steps", "--step", "3"],
         "invalid_argument: --step=3: scenario 'scripted-three-steps' has steps 0..2"),
        (["--scenario", "no-compaction", "--step", "-1"], "Invalid value for '--step'"),  # Typer's range: 0<=x<=99
        (["--scenario", "no-compaction", "--workers", "0"], "Invalid value for '--workers'"),
        (["--scenario", "pr-validation-no-compaction", "--step", "1"],
         "invalid_argument: --step=1: scenario 'pr-validation-no-compaction' runs in policy mode"),
        (["--scenario", "no-compaction", "--seed", "-1"], "Invalid value for '--seed'"),
        (["--step", "1"], "usage error: option --step needs --scenario"),
    ],
)
def test_rollout_scenario_usage_errors_exit_2(tmp_path, args, message):
    result = CliRunner().invoke(app, ["rollout", "--out", str(tmp_path / "o"), *args])
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "o").exists()


def test_rollout_unknown_scenario_exits_2_with_suggestions(tmp_path):
    result = CliRunner().invoke(app, ["rollout", "--scenario", "compaction-k2", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert result.stderr == ("error: invalid_argument: unknown scenario 'compaction-k2'; did you mean "
                             "'policy-image-compaction-k2', 'image-compaction-k2-chunked', 'image-compaction-k2-rolling', "
                             "'pr-validation-image-compaction-k2' or 'no-compaction'?\n")
    assert not (tmp_path / "o").exists()


def test_a_rerun_with_fewer_rollouts_leaves_none_of_the_older_runs_files(tmp_path):
    """rollout-0-2 and rollout-0-3 of a four-rollout run stayed beside a two-rollout rerun (CLI probe)."""
    out = tmp_path / "o"
    for n in ("4", "2"):
        result = runner.invoke(app, ["rollout", "--out", str(out), "--turns", "2", "--rollouts", n])
        assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        "rollout-0-0.ground_truth.json", "rollout-0-0.result.json", "rollout-0-1.ground_truth.json",
        "rollout-0-1.result.json", "summary.json"]


def test_a_folder_holding_other_files_is_refused_unless_forced_and_then_kept(tmp_path):
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "summary.json").write_text('{"mine": true}')  # not a rollout summary (an object, not a list of rows)
    result = runner.invoke(app, ["rollout", "--out", str(out), "--turns", "2"])
    assert result.exit_code == 2
    assert f"--out {out}: the folder holds files `compactsim rollout` does not write (notes.txt, summary.json)" in result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "summary.json"]
    result = runner.invoke(app, ["rollout", "--out", str(out), "--turns", "2", "--force"])
    assert result.exit_code == 0, result.output
    assert (out / "notes.txt").read_text() == "mine" and isinstance(json.loads((out / "summary.json").read_text()), list)
