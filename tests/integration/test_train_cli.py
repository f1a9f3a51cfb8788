"""`compactsim train`: one-step smoke runs with exact values, and its usage errors."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from compactsim.harness.cli import app

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
runner = CliRunner()


def test_train_command_runs_one_step_and_prints_the_summary_as_json(tmp_path):
    result = runner.invoke(app, ["train", "pr-validation-image-compaction-k2", "--steps", "1", "--seed", "0",
                                 "--out", str(tmp_path), "--dp-size", "2", "--micro-batch-size", "2", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert {k: summary[k] for k in ("scenario", "steps", "optimizer_steps", "scheduler_steps", "final_policy_version",
                                    "total_rows", "device", "dtype", "async_mode")} == {
        "scenario": "pr-validation-image-compaction-k2", "steps": 1, "optimizer_steps": 1, "scheduler_steps": 1,
        "final_policy_version": 1, "total_rows": 8, "device": "cpu", "dtype": "float64", "async_mode": False,
    }
    assert summary["max_token_mult_prob_error_dev"] <= 1e-9
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["trainer"]["policy"]["dp_size"], config["trainer"]["policy"]["train_micro_batch_size"]) == (2, 2)


def test_train_command_prints_one_line_per_step_and_a_table(tmp_path):
    result = runner.invoke(app, ["train", "pr-validation-no-compaction", "--steps", "1", "--out", str(tmp_path),
                                 "--no-save-rollouts", "--backend", "compactsim.harness.pipeline:ReferenceBackend"])
    assert result.exit_code == 0, result.output
    assert "step   0  rows   4  loss +0.000000  tmpe-1 " in result.stdout
    assert "optimizer steps / scheduler increments │ 1 / 1" in result.stdout
    assert not (tmp_path / "rollouts").exists()


def test_train_command_rejects_an_unknown_scenario_with_exit_code_2(tmp_path):
    result = runner.invoke(app, ["train", "no-such-run", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "no scenario or tag 'no-such-run'" in result.stderr


def test_train_command_rejects_a_backend_that_does_not_load(tmp_path):
    result = runner.invoke(app, ["train", "pr-validation-no-compaction", "--out", str(tmp_path), "--backend", "nope"])
    assert result.exit_code == 2
    assert "expected 'module:attr'" in result.stderr


def test_a_backend_that_crashes_is_a_typed_error_naming_the_step_and_stage(tmp_path):
    result = runner.invoke(app, ["train", "pr-validation-no-compaction", "--steps", "1", "--out", str(tmp_path),
                                 "--no-save-rollouts", "--backend", "tests.quality.crashing_train_step:Backend", "--json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.stdout) == {
        "error_code": "training_failed",
        "message": "training_failed: step 0: the backend's train_step raised RuntimeError: "
                   "CUDA error: an illegal memory access was encountered"}


@pytest.mark.parametrize(("module", "says"), [
    ("raises_its_own_base_exception", "the backend's plan raised Cancelled: the scheduler cancelled this job"),
    ("raises_generator_exit", "the backend's materialize raised GeneratorExit: the row loader was closed mid-batch"),
    ("exits_the_process", "the backend's train_step raised SystemExit: 1"),
    ("unprintable_error", "the backend's train_step raised RemoteError: <RemoteError whose str() raised>"),
])
def test_a_backend_failing_outside_the_exception_hierarchy_is_the_same_typed_error(tmp_path, module, says):
    result = runner.invoke(app, ["train", "pr-validation-no-compaction", "--steps", "1", "--out", str(tmp_path),
                                 "--no-save-rollouts", "--backend", f"tests.quality.{module}:Backend"])
    assert (result.exit_code, "Traceback" in result.output) == (2, False), result.output
    assert f"error: training_failed: step 0: {says}" in result.stderr


def test_train_imports_a_backend_from_the_current_directory_as_run_does(tmp_path, monkeypatch):
    (tmp_path / "own_backend_for_train.py").write_text(
        "from compactsim.harness.pipeline.backend import ReferenceBackend as Backend\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "own_backend_for_train", raising=False)
    result = runner.invoke(app, ["train", "pr-validation-no-compaction", "--steps", "1", "--out", str(tmp_path / "out"),
                                 "--no-save-rollouts", "--backend", "own_backend_for_train:Backend"])
    assert result.exit_code == 0, result.output


def test_weights_the_generation_server_refuses_end_the_run_with_a_typed_error(tmp_path):
    """A NaN left by the backend: the push after step 0 is refused (422), and the command says so instead of a traceback."""
    result = runner.invoke(app, ["train", "layout-dp2-kl-steps-clip-binds", "--steps", "2", "--out", str(tmp_path),
                                 "--no-save-rollouts", "--backend", "tests.quality.non_finite_weights:Backend"])
    assert result.exit_code == 2, result.output
    assert "error: training_failed: step 0: POST /weights answered 422: " in result.output
    assert "parameter 'patch_pos' holds 1 non-finite value(s), the first at [0, 0]: nan" in result.output
    assert "Traceback" not in result.output


def test_a_rerun_with_fewer_steps_leaves_none_of_the_older_runs_step_files(tmp_path):
    """step-0001 of a two-step run stayed beside a one-step rerun's step-0000 (CLI probe)."""
    for steps in ("2", "1"):
        result = runner.invoke(app, ["train", "no-compaction", "--steps", steps, "--out", str(tmp_path)])
        assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "artifacts").iterdir()) == ["step-0000.json", "step-0000.npz"]
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == ["step-0000.jsonl"]
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [0]


def test_a_users_config_json_is_refused_not_overwritten(tmp_path):
    (tmp_path / "config.json").write_text('{"my": "precious"}')
    result = runner.invoke(app, ["train", "no-compaction", "--steps", "1", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "the folder holds files `compactsim train` does not write (config.json)" in result.stderr
    assert (tmp_path / "config.json").read_text() == '{"my": "precious"}'
