"""Training runs end to end on a small budget: outputs, determinism, step counting, async versions, servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from compactsim.harness.core import metrics as M
from compactsim.harness.core.artifacts import decode_step_artifact
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.train_run import load_run_config, resolve_device, run_training

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


def _metrics(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _artifact(out: Path, step: int):
    stem = out / "artifacts" / f"step-{step:04d}"
    return decode_step_artifact(stem.with_suffix(".npz").read_bytes(), json.loads(stem.with_suffix(".json").read_text()))


def test_train_run_writes_metrics_timings_artifacts_rollouts_and_summary(tmp_path):
    run = load_run_config("pr-validation-image-compaction-k2", seed=0, steps=2)
    summary = run_training(run, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "artifacts", "config.json", "metrics.jsonl", "rollouts", "timings.jsonl", "train_summary.json",
    ]
    assert json.loads((tmp_path / "train_summary.json").read_text()) == summary.to_json()
    assert (summary.optimizer_steps, summary.scheduler_steps, summary.final_policy_version) == (2, 2, 2)
    assert summary.total_rows == 16 and summary.max_token_mult_prob_error_dev <= 1e-9
    metrics = _metrics(tmp_path)
    assert [m["step"] for m in metrics] == [0, 1]
    assert [m[M.TRAINED_POLICY_VERSION] for m in metrics] == [0, 1]
    assert not any(k.startswith(M.TIMING_PREFIX) for m in metrics for k in m)
    timings = [json.loads(line) for line in (tmp_path / "timings.jsonl").read_text().splitlines()]
    assert set(timings[0]) == {"step", M.TIMING_GENERATION, M.TIMING_MATERIALIZE, M.TIMING_TRAIN,
                               M.TIMING_WEIGHT_PUSH, M.TIMING_STEP}
    artifact = _artifact(tmp_path, 1)
    assert artifact.trained_policy_version == 1
    assert artifact.arrays["row_generation_policy_version"].tolist() == [1] * 8
    assert artifact.metrics == {k: v for k, v in metrics[1].items() if k != "step"}
    rollouts = (tmp_path / "rollouts" / "step-0001.jsonl").read_text().splitlines()
    assert [json.loads(line)["rollout_id"] for line in rollouts] == [
        "group0002-rollout0", "group0002-rollout1", "group0003-rollout0", "group0003-rollout1",
    ]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["backend"] == "compactsim.harness.pipeline.backend:ReferenceBackend"
    assert config["trainer"]["policy"]["router_replay_enabled"] is True


def test_train_run_is_byte_identical_for_the_same_seed_and_differs_for_another(tmp_path):
    outs = []
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        run_training(load_run_config("pr-validation-no-compaction", seed=seed, steps=2, save_rollouts=False), tmp_path / name)
        outs.append(tmp_path / name)
    files = ["metrics.jsonl", "train_summary.json", "artifacts/step-0001.npz", "artifacts/step-0001.json"]
    for f in files:
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    assert (outs[0] / "metrics.jsonl").read_bytes() != (outs[2] / "metrics.jsonl").read_bytes()


def test_compaction_doubles_the_rows_but_not_the_optimizer_steps_or_scheduler_increments():
    seen: dict[str, list[tuple[int, int, int, float]]] = {}
    for name in ("pr-validation-no-compaction", "pr-validation-image-compaction-k2"):
        records: list[tuple[int, int, int, float]] = []
        run = load_run_config(name, seed=0, steps=3, trainer_overrides={"policy": {"lr_warmup_steps": 4}})
        run_training(run, None, on_step=lambda r, out=records: out.append((
            int(r.metrics[M.NUM_PHYSICAL_ROWS]), int(r.metrics[M.OPTIMIZER_STEP_COUNT]),
            int(r.metrics[M.SCHEDULER_STEP_COUNT]), float(r.metrics[M.LR]))))
        seen[name] = records
    flat, k2 = seen["pr-validation-no-compaction"], seen["pr-validation-image-compaction-k2"]
    assert [r[0] for r in flat] == [4, 4, 4] and [r[0] for r in k2] == [8, 8, 8]
    assert [r[1:] for r in flat] == [r[1:] for r in k2] == [(1, 1, 0.00025), (2, 2, 0.0005), (3, 3, 0.00075)]


def test_async_run_trains_mixed_age_batches_with_correction_and_records_each_rows_versions(tmp_path):
    run = load_run_config("pr-validation-image-compaction-k2", seed=0, steps=3, async_mode=True, save_rollouts=False)
    summary = run_training(run, tmp_path)
    assert (summary.optimizer_steps, summary.final_policy_version) == (3, 3)
    config = json.loads((tmp_path / "config.json").read_text())["trainer"]
    assert config["grpo"]["async_grpo"] == {
        "enabled": True, "max_trajectory_age_steps": 1, "in_flight_weight_updates": False,
        "recompute_kv_cache_after_weight_updates": False,
    }
    assert config["loss_fn"]["use_importance_sampling_correction"] is True
    metrics = _metrics(tmp_path)
    assert [m[M.ASYNC_TRAJECTORY_AGE_MEAN] for m in metrics] == [0.0, 0.5, 0.5]
    assert [m[M.ASYNC_TRAJECTORY_AGE_MAX] for m in metrics] == [0, 1, 1]
    step1 = _artifact(tmp_path, 1)
    assert step1.arrays["row_trained_policy_version"].tolist() == [1] * 8
    assert step1.arrays["row_generation_policy_version"].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    assert step1.replay == {
        "trained_version": 1,
        "groups": [
            {"group_key": "group0002", "num_rollouts": 2, "generation_version": 0, "target_version": 1},
            {"group_key": "group0003", "num_rollouts": 2, "generation_version": 1, "target_version": 1},
        ],
        "evicted": [],
    }
    # stale rows were generated by version 0 and trained by version 1: the error shows it, IS corrects it
    assert metrics[1][M.TOKEN_MULT_PROB_ERROR] - 1.0 > 1e-3
    assert metrics[1]["sampling_importance_ratio"] != pytest.approx(1.0, abs=1e-6)
    assert abs(metrics[0][M.TOKEN_MULT_PROB_ERROR] - 1.0) <= 1e-9


def test_async_run_refuses_to_start_without_importance_sampling_correction(tmp_path):
    run = load_run_config("pr-validation-image-compaction-k2", steps=1, async_mode=True,
                          trainer_overrides={"loss_fn": {"use_importance_sampling_correction": False}})
    with pytest.raises(ConfigError) as err:
        run_training(run, tmp_path / "out")
    assert err.value.code == "unsupported_config"
    assert any("grpo.async_grpo.enabled=True requires loss_fn.use_importance_sampling_correction=True" in v
               for v in err.value.violations)
    assert not (tmp_path / "out").exists()


def test_async_prefetch_beyond_the_age_limit_is_rejected():
    run = load_run_config("pr-validation-no-compaction", steps=1, async_mode=True, async_prefetch_groups=3)
    with pytest.raises(ConfigError) as err:
        run_training(run, None)
    assert err.value.code == "invalid_config"
    assert "async_prefetch_groups=3 exceeds max_trajectory_age_steps × num_prompts_per_step = 1 × 2" in err.value.detail


def test_training_against_a_loopback_http_server_matches_the_in_process_server():
    seen = {}
    for server in ("inprocess", "http"):
        records: list[dict[str, Any]] = []
        run_training(load_run_config("pr-validation-no-compaction", seed=1, steps=1, server=server), None,
                     on_step=lambda r, out=records: out.append(dict(r.metrics)))
        seen[server] = records
    assert seen["http"] == seen["inprocess"]


def test_bfloat16_training_pushes_its_rounded_weights_before_the_first_rollout():
    records: list[Any] = []
    summary = run_training(load_run_config("pr-validation-no-compaction", steps=1, dtype="bfloat16"), None,
                           on_step=records.append)
    assert records[0].metrics[M.TRAINED_POLICY_VERSION] == 1  # version 0 was the server's float32 init
    assert summary.final_policy_version == 2
    assert summary.max_token_mult_prob_error_dev <= summary.tolerance


def test_unknown_training_scenario_lists_the_reference_runs():
    with pytest.raises(ConfigError) as err:
        load_run_config("no-such-run")
    assert err.value.code == "invalid_argument"
    assert (
        "unknown training scenario 'no-such-run'; reference runs: "
        "['pr-validation-no-compaction', 'pr-validation-image-compaction-k2']" in err.value.detail
    )


def test_adversarial_scenario_is_not_a_training_recipe():
    with pytest.raises(ConfigError) as err:
        load_run_config("mutation-ghost-media")
    assert err.value.code == "invalid_argument"
    assert "scenario 'mutation-ghost-media' is not a plain training recipe" in err.value.detail


def test_invalid_run_settings_are_reported_by_name():
    with pytest.raises(ConfigError) as err:
        load_run_config("pr-validation-no-compaction", dtype="float16", steps=0)
    assert err.value.code == "invalid_config"
    assert len(err.value.violations) == 2
    assert any(v.startswith("dtype='float16'") for v in err.value.violations)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine")
def test_device_auto_picks_the_cpu_without_a_gpu_and_cuda_is_refused():
    assert resolve_device("auto") == "cpu"
    with pytest.raises(ConfigError) as err:
        resolve_device("cuda")
    assert "--device cuda: no CUDA device is available" in err.value.detail


def test_train_run_logs_to_wandb_offline_under_the_output_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_training(load_run_config("pr-validation-no-compaction", steps=1, wandb=True, save_rollouts=False), tmp_path)
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    assert np.isfinite(_metrics(tmp_path)[0]["loss"])
