"""`compactsim train` on the feature's 20-step image-compaction validation run, on CPU, in float32:
every step's counts, rewards, groups, screenshots and generation versions, and token_mult_prob_error
within float32 precision.

The float64 bound (within 1e-9 of 1 at every one of the 20 steps) is checked on the default suite's own
runs of both validation runs, which train with the same backend through the runner
(tests/e2e/test_catalogue_scenarios.py); the train command's own shorter float64 runs of both are in
test_train_run.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compactsim.harness.core import metrics as M
from compactsim.harness.core.artifacts import decode_step_artifact
from compactsim.harness.train_run import load_run_config, resolve_recipe, run_training

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")]

SCENARIO = "pr-validation-image-compaction-k2"
#: real rows per step, logical rollouts split per step
ROWS, SPLIT = 8, 4


def _steps(out: Path) -> list[tuple[dict[str, Any], Any]]:
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    artifacts = []
    for step in range(len(metrics)):
        stem = out / "artifacts" / f"step-{step:04d}"
        artifacts.append(decode_step_artifact(stem.with_suffix(".npz").read_bytes(),
                                              json.loads(stem.with_suffix(".json").read_text())))
    return list(zip(metrics, artifacts, strict=True))


def test_image_compaction_run_counts_by_logical_rollout_and_keeps_token_mult_prob_error_within_1e5_in_float32(tmp_path):
    summary = run_training(load_run_config(SCENARIO, seed=0, dtype="float32", save_rollouts=False), tmp_path)
    assert resolve_recipe(SCENARIO).steps == summary.steps == 20
    assert (summary.optimizer_steps, summary.scheduler_steps, summary.final_policy_version) == (20, 20, 20)
    steps = _steps(tmp_path)
    assert len(steps) == 20
    for step, (m, artifact) in enumerate(steps):
        assert abs(m[M.TOKEN_MULT_PROB_ERROR] - 1.0) <= 1e-5, f"step {step}: {m[M.TOKEN_MULT_PROB_ERROR]!r}"
        assert (m[M.NUM_PHYSICAL_ROWS], m[M.NUM_SPLIT_ROLLOUTS], m[M.NUM_LOGICAL_ROLLOUTS]) == (ROWS, SPLIT, 4)
        assert (m[M.OPTIMIZER_STEP_COUNT], m[M.SCHEDULER_STEP_COUNT]) == (step + 1, step + 1)
        # one update and one scheduler increment per logical batch; a sample-counting scheduler gets the 4 rollouts
        assert (m[M.OPTIMIZER_STEPS], m[M.SCHEDULER_INCREMENTS], m[M.SCHEDULER_STEP_INCREMENT]) == (1, 1, 4)
        assert m[M.TRAINED_POLICY_VERSION] == step
        rewards = [rec["reward"] for rec in artifact.logical]
        assert sorted(set(rewards)) == [0.0, 1.0], f"step {step}: rewards {rewards}"
        groups = [rec["group_key"] for rec in artifact.logical]
        assert all(groups.count(g) >= 2 for g in groups)
        assert all(len(ids) >= 2 for ids in artifact.row_media_ids[:ROWS])  # multimodal: screenshots in every row
        assert set(artifact.arrays["row_generation_policy_version"].tolist()) == {step}
    assert steps[-1][0]["kl_penalty"] > 0.0  # the policy moved away from the reference
