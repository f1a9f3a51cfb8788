"""`--steps N` rescales every step-count expectation, so a capped run of a passing scenario passes."""

from __future__ import annotations

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.runner import RunOptions, prepare_scenario, run_scenario
from compactsim.scenarios.catalogue import default_catalogue
from compactsim.scenarios.metric_expectations import (
    STEP_COUNT_METRICS,
    evaluate,
    is_step_count,
    parse_metric_expectations,
    parse_metric_key,
    scale_step_counts,
)

CATALOGUE = default_catalogue().scenarios


def test_scale_step_counts_rescales_sums_of_step_counts_only():
    entries = {
        "sum(physical_trace_training/optimizer_steps)": {"equals": 20},
        "sum(train/scheduler_increments)": {"between": [19, 21], "min": 10},
        "physical_trace_training/optimizer_steps": {"equals": 1},
        "mean(token_mult_prob_error)": {"max_abs_dev": 1e-9, "reference": 1.0},
        "sum(physical_trace_training/num_physical_rows)": {"equals": 160},
    }
    assert scale_step_counts(entries, 20, 6) == {
        "sum(physical_trace_training/optimizer_steps)": {"equals": 6},
        "sum(train/scheduler_increments)": {"between": [5.7, 6.3], "min": 3},
        "physical_trace_training/optimizer_steps": {"equals": 1},
        "mean(token_mult_prob_error)": {"max_abs_dev": 1e-9, "reference": 1.0},
        "sum(physical_trace_training/num_physical_rows)": {"equals": 160},
    }
    assert scale_step_counts(entries, 20, 20) == entries
    with pytest.raises(ConfigError, match="unknown check"):
        scale_step_counts({"loss": {"about": 1}}, 2, 1)


def test_prepare_scenario_scales_the_k2_reference_run_to_the_cap():
    k2 = default_catalogue().get("pr-validation-image-compaction-k2")
    assert k2.metrics["sum(physical_trace_training/optimizer_steps)"] == {"equals": 20}
    capped = prepare_scenario(k2, RunOptions(max_steps=6))
    assert (capped.steps, capped.metrics["sum(physical_trace_training/optimizer_steps)"]) == (6, {"equals": 6})
    assert capped.metrics["physical_trace_training/optimizer_steps"] == {"equals": 1}
    assert prepare_scenario(k2, RunOptions(max_steps=40)) is k2  # a cap above the scenario's steps changes nothing


def test_a_cap_keeps_each_overrides_steps_below_it_and_drops_one_left_with_none():
    from compactsim.scenarios.model import Scenario

    text = {"generate": {"turns": 2, "images_per_observation": 0}}
    s = Scenario.model_validate({"name": "s", "purpose": "p", "steps": 3, "group_size": 2, "rollouts": [
        {"index": 0, "steps": [0, 1], "script": text}, {"index": 1, "steps": [2], "script": text},
        {"index": 1, "compaction": "identity"}]})
    capped = prepare_scenario(s, RunOptions(max_steps=1))
    assert [(o.index, o.steps) for o in capped.rollouts] == [(0, (0,)), (1, None)]
    assert [(o.index, o.steps) for o in prepare_scenario(s, RunOptions(max_steps=2)).rollouts] == [
        (0, (0, 1)), (1, None)]


def test_a_cap_drops_the_edits_aimed_at_the_steps_it_cuts_off():
    """They used to make the capped scenario invalid: a pydantic traceback as a harness error (fuzzing round 4)."""
    from compactsim.scenarios.model import Scenario

    s = Scenario.model_validate({"name": "s", "purpose": "p", "steps": 3,
                                 "mutation": {"name": "corrupt_digest", "step": 2, "index": 1},
                                 "corruption": {"kind": "drop_rollout", "step": 1, "index": 0},
                                 "faults": [{"kind": "http_500", "step": 2}, {"kind": "http_500", "step": 0},
                                            {"kind": "http_503"}],
                                 "expect": {"verdict": "error", "code": "evidence_digest_mismatch"}})
    one = prepare_scenario(s, RunOptions(max_steps=1))
    assert (one.mutation, one.corruption, [(f.kind, f.step) for f in one.faults]) == (
        None, None, [("http_500", 0), ("http_503", None)])
    two = prepare_scenario(s, RunOptions(max_steps=2))
    assert (two.mutation, two.corruption.step, len(two.faults)) == (None, 1, 2)


def test_a_declared_error_beyond_the_cap_is_no_finding():
    """`run --steps 1` over the catalogue failed `sequence-too-long-from-step-1` (its error lies at step 1) with
    scenario.declared_verdict; the capped scenario rightly succeeds. An error inside the cap is still declared."""
    scenario = default_catalogue().get("sequence-too-long-from-step-1")
    capped = run_scenario(scenario, RunOptions(max_steps=1))
    assert (capped.record.passed, capped.record.expected, capped.record.findings) == (True, "success", ())
    mismatch = scenario.model_validate({**scenario.to_data(), "expect": {"verdict": "error", "code": "oversized_group"}})
    full = run_scenario(mismatch, RunOptions(max_steps=2))  # the cap cuts nothing: the declared verdict is checked
    assert "scenario.declared_verdict" in {f.check for f in full.record.findings}
    # a cap that cuts steps but drops no edit or override did not remove the error's cause: still checked
    wrong = scenario.model_validate({"name": "wrong-declared-error", "purpose": "p", "steps": 2,
                                     "expect": {"verdict": "error", "code": "missing_routed_experts"}})
    capped = run_scenario(wrong, RunOptions(max_steps=1))
    assert "scenario.declared_verdict" in {f.check for f in capped.record.findings}


@pytest.mark.parametrize("scenario", CATALOGUE, ids=lambda s: s.name)
def test_every_catalogue_scenario_capped_to_one_step_expects_one_step(scenario):
    """Symbolically: a capped run reports one optimizer step and one scheduler increment per step; every
    run-level step-count expectation of the prepared scenario must accept exactly that."""
    capped = prepare_scenario(scenario, RunOptions(max_steps=1))  # edits aimed past the cap are dropped
    assert capped.steps == 1
    sums = [k for k in capped.metrics if parse_metric_key(k)[1] == "sum"]
    assert all(is_step_count(k) for k in sums), f"a run-level sum that cannot be rescaled: {sums}"
    expectations = [e for e in parse_metric_expectations(capped.metrics)
                    if e.aggregate == "sum" and e.metric in STEP_COUNT_METRICS]
    per_step = [{m: 1 for m in STEP_COUNT_METRICS}] * capped.steps
    assert [o.ok for o in evaluate(expectations, per_step)] == [True] * len(expectations)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "steps"), [("pr-validation-image-compaction-k2", 2), ("pr-validation-no-compaction", 1)])
def test_capped_reference_runs_pass(name: str, steps: int):
    run = run_scenario(default_catalogue().get(name), RunOptions(max_steps=steps))
    assert (run.record.passed, run.record.steps, [str(f) for f in run.record.findings]) == (True, steps, [])
