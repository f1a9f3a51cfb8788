"""`compactsim run | list | show | replay | shrink` smoke tests at the smallest budget, with exact values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from compactsim.harness.cli import app

pytestmark = [pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

BROKEN = "tests.quality.broadcast_first_advantage:Backend"


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_run_passes_and_writes_summary_report_and_timings(tmp_path: Path):
    out = tmp_path / "out"
    result = invoke("run", "explicit-logprobs", "legacy-token-merge-drift", "--seed", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "2/2 scenarios met their expected verdict" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["passed"] is True and summary["seed"] == 2
    assert [(s["name"], s["verdict"], s["observed"]) for s in summary["scenarios"]] == [
        ("explicit-logprobs", "pass", "success"),
        ("legacy-token-merge-drift", "pass", "error:undeclared_discontinuity"),
    ]
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")
    timings = json.loads((out / "timings.json").read_text())
    assert set(timings["scenarios"]) == {"explicit-logprobs", "legacy-token-merge-drift"}


def test_run_json_prints_the_summary(tmp_path: Path):
    result = invoke("run", "explicit-logprobs", "--out", str(tmp_path / "o"), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["counts"] == {"failed": 0, "findings": 0, "passed": 1, "scenarios": 1}
    assert result.stdout == (tmp_path / "o" / "summary.json").read_text()  # the file's bytes, keys sorted alike


def test_a_mutation_that_cannot_apply_to_its_rollout_is_bad_input_after_the_run(tmp_path: Path):
    """Whether `remove_media_asset` applies is known only once the rollout exists (this script shows no image):
    the run writes its outputs, the scenario's record is a harness error, and the exit is 2 (bad input), not 1."""
    path = tmp_path / "edit.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [{
        "name": "edit-without-media", "purpose": "a mutation with nothing to edit",
        "script": {"generate": {"turns": 3, "image_pattern": "screens", "images_per_observation": 0}},
        "mutation": {"name": "remove_media_asset", "index": 0}}]}))
    out = tmp_path / "out"
    result = invoke("run", str(path), "--out", str(out), "--json")
    assert result.exit_code == 2, result.output
    summary = json.loads(result.stdout)  # stdout stays the summary; the reason goes to stderr
    (record,) = summary["scenarios"]
    assert (record["observed"], [f["check"] for f in record["findings"]]) == ("harness_error", ["run.harness_error"])
    assert ("error: invalid_config: scenario 'edit-without-media': mutation 'remove_media_asset' does not apply to "
            "'s0-g0-r0' at step 0: payload has no call with media") in result.stderr
    assert json.loads((out / "run-state.json").read_text())["status"] == "complete"


def test_run_unknown_scenario_is_a_usage_error(tmp_path: Path):
    result = invoke("run", "no-such-scenario", "--out", str(tmp_path / "o"))
    assert result.exit_code == 2
    assert "invalid_argument" in result.output and "'no-such-scenario'" in result.output


def test_run_bad_backend_is_a_usage_error(tmp_path: Path):
    result = invoke("run", "explicit-logprobs", "--backend", "nope", "--out", str(tmp_path / "o"))
    assert result.exit_code == 2
    assert "expected 'module:attr'" in result.output


def test_list_shows_every_catalogue_scenario():
    result = invoke("list", "--json")
    assert result.exit_code == 0
    names = [s["name"] for s in json.loads(result.output)]
    assert "explicit-logprobs" in names and "pr-validation-image-compaction-k2" in names
    assert len(names) >= 30


def test_show_prints_a_catalogue_entry():
    result = invoke("show", "explicit-logprobs")
    assert result.exit_code == 0
    assert result.output.startswith("explicit-logprobs — ")
    entry = yaml.safe_load(result.output[result.output.index("scenarios:"):])
    assert entry["scenarios"][0]["name"] == "explicit-logprobs"


def test_replay_of_a_run_directory_reproduces_its_failure(tmp_path: Path):
    out = tmp_path / "out"
    assert invoke("run", "explicit-logprobs", "--backend", BROKEN, "--out", str(out)).exit_code == 1
    result = invoke("replay", str(out))
    assert result.exit_code == 1, result.output
    assert "explicit-logprobs: FAIL" in result.output and "same findings as saved" in result.output
    assert "[row.advantage]" in result.output


def test_replay_of_a_payload_file_plans_and_materializes(tmp_path: Path):
    out = tmp_path / "out"
    assert invoke("run", "image-compaction-k2-rolling", "--out", str(out)).exit_code == 0
    payload = out / "scenarios" / "image-compaction-k2-rolling" / "results" / "step-0000.jsonl"
    result = invoke("replay", str(payload), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["ok"] is True
    assert [len(r["traces"]) for r in data["rollouts"]] == [3, 3]
    assert [row["physical_trace_id"] for row in data["rows"]][:2] == ["s0-g0-r0/trace-0", "s0-g0-r0/trace-1"]


def test_replay_of_a_broken_payload_names_the_contract_error(tmp_path: Path):
    out = tmp_path / "out"
    assert invoke("run", "image-compaction-k2-rolling", "--out", str(out)).exit_code == 0
    lines = (out / "scenarios" / "image-compaction-k2-rolling" / "results" / "step-0000.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["response"]["output"][-1]["generation_log_probs"].pop()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(first))
    result = invoke("replay", str(bad))
    assert result.exit_code == 2
    assert "rollout 0 (s0-g0-r0): evidence_digest_mismatch turn 5: generation_evidence_digest" in result.output


def test_shrink_writes_a_smaller_failing_catalogue_entry(tmp_path: Path):
    from compactsim.scenarios.catalogue import load_file

    result = invoke("shrink", "image-compaction-k2-rolling", "--backend", BROKEN, "--out", str(tmp_path), "--json",
                    "--max-examples", "20")
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert (info["calls_before"], info["calls_after"]) == (10, 2)
    assert "row.advantage" in info["checks"]
    entry = load_file(Path(info["file"]))[0]
    assert entry.name == "image-compaction-k2-rolling-shrunk"
    assert "shrunk" in entry.tags and entry.group_size == 2 and entry.script.num_turns == 1


def test_shrink_refuses_a_passing_scenario(tmp_path: Path):
    result = invoke("shrink", "explicit-logprobs", "--out", str(tmp_path / "shrunk"))
    assert result.exit_code == 2
    assert "passes the audit" in result.output
    assert not (tmp_path / "shrunk").exists()  # made for an entry that never came: not left behind, empty


def test_run_with_wandb_writes_an_offline_run(tmp_path: Path):
    out = tmp_path / "out"
    result = invoke("run", "explicit-logprobs", "--wandb", "--out", str(out))
    assert result.exit_code == 0, result.output
    runs = list((out / "wandb").rglob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
