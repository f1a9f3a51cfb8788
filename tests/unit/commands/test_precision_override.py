"""`--precision P` trains every scenario in P: the trainer's precision and logprob dtype, float64-only deviations widened."""

from __future__ import annotations

import pytest

from compactsim.harness.audit.findings import reproduce_command
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.runner import RunOptions, prepare_scenario
from compactsim.scenarios.catalogue import default_catalogue
from compactsim.scenarios.metric_expectations import widen_deviations


def test_widen_deviations_raises_only_deviations_below_the_floor():
    entries = {
        "token_mult_prob_error": {"max_abs_dev": 1e-9, "reference": 1.0},
        "mean(loss)": {"max_abs_dev": 0.5, "reference": 0.0},
        "physical_trace_training/optimizer_steps": {"equals": 1},
        "mean(token_mult_prob_error)": {"between": [0.999999, 1.000001]},
    }
    assert widen_deviations(entries, 1e-6) == {
        "token_mult_prob_error": {"max_abs_dev": 1e-6, "reference": 1.0},
        "mean(loss)": {"max_abs_dev": 0.5, "reference": 0.0},
        "physical_trace_training/optimizer_steps": {"equals": 1},
        "mean(token_mult_prob_error)": {"between": [0.999999, 1.000001]},
    }
    with pytest.raises(ConfigError, match="unknown check"):
        widen_deviations({"loss": {"about": 1}}, 1e-6)


def test_prepare_scenario_sets_the_trainer_precision_and_widens_float64_deviations():
    k2 = default_catalogue().get("pr-validation-image-compaction-k2")
    assert k2.trainer_config().policy.precision == "float64"
    in32 = prepare_scenario(k2, RunOptions(precision="float32"))
    policy = in32.trainer_config().policy
    assert (policy.precision, policy.logprob_dtype) == ("float32", "float32")
    assert in32.metrics["token_mult_prob_error"] == {"max_abs_dev": 1e-6, "reference": 1.0}
    assert in32.metrics["sum(physical_trace_training/optimizer_steps)"] == k2.metrics["sum(physical_trace_training/optimizer_steps)"]
    same = prepare_scenario(k2, RunOptions(precision="float64"))  # float64 already: the same training, keys now explicit
    assert (same.trainer_config(), same.metrics) == (k2.trainer_config(), k2.metrics)
    f32 = default_catalogue().get("float32-training")
    policy = prepare_scenario(f32, RunOptions(precision="float64")).trainer_config().policy
    assert (policy.precision, policy.logprob_dtype) == ("float64", "float64")


def test_the_reproduce_command_and_run_json_carry_the_precision():
    assert reproduce_command("s", 3, precision="float32") == "compactsim run s --seed 3 --precision float32"
    assert reproduce_command("s", 3) == "compactsim run s --seed 3"
    assert RunOptions(precision="float32").to_json()["precision"] == "float32"
    assert "precision" not in RunOptions().to_json()  # runs without the option write the run.json they always did
