"""`compactsim run` on the default suite (the whole catalogue, reference runs included) meets every
verdict, scenario by scenario; and two scenarios through the pytest plugin. One file, so one
pytest-xdist worker reads the session's one default-suite run (the other never waits for it)."""

from __future__ import annotations

import pytest

from compactsim.harness.core import metrics as M
from compactsim.scenarios.catalogue import list_scenarios

pytestmark = [pytest.mark.timeout(1500), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


@pytest.mark.slow
def test_default_suite_meets_every_expected_verdict(default_suite):
    out = default_suite.out
    assert default_suite.exit_code == 0, default_suite.output[-4000:]
    summary = default_suite.summary
    names = [s.name for s in list_scenarios()]
    assert [s["name"] for s in summary["scenarios"]] == names
    assert summary["counts"] == {"scenarios": len(names), "passed": len(names), "failed": 0, "findings": 0}
    assert (out / "report.html").stat().st_size > 0


#: The feature's two 20-step validation runs: (scenario, real rows per step, logical rollouts split per step).
#: The float64 bound at every step is checked here only; `compactsim train` runs the image-compaction one in float32
#: (tests/integration/test_train_reference_runs.py) and `make bench` times it in float64 (bench/bench_train.py).
REFERENCE_RUNS = [("pr-validation-no-compaction", 4, 0), ("pr-validation-image-compaction-k2", 8, 4)]


@pytest.mark.slow
@pytest.mark.parametrize(("ref", "rows", "split"), REFERENCE_RUNS)
def test_reference_run_keeps_token_mult_prob_error_within_1e9_and_counts_by_logical_rollout(default_suite, ref: str,
                                                                                           rows: int, split: int):
    record = default_suite.scenario(ref)
    assert record["steps"] == 20 and len(record["metrics"]) == 20
    for step, m in enumerate(record["metrics"]):
        assert abs(m[M.TOKEN_MULT_PROB_ERROR] - 1.0) <= 1e-9, f"step {step}: {m[M.TOKEN_MULT_PROB_ERROR]!r}"
        assert (m[M.NUM_PHYSICAL_ROWS], m[M.NUM_SPLIT_ROLLOUTS], m[M.NUM_LOGICAL_ROLLOUTS]) == (rows, split, 4)
        assert (m[M.OPTIMIZER_STEP_COUNT], m[M.SCHEDULER_STEP_COUNT]) == (step + 1, step + 1)
        # one update and one scheduler increment per logical batch; a sample-counting scheduler gets the 4 rollouts
        assert (m[M.OPTIMIZER_STEPS], m[M.SCHEDULER_INCREMENTS], m[M.SCHEDULER_STEP_INCREMENT]) == (1, 1, 4)
        assert m[M.TRAINED_POLICY_VERSION] == step
    assert record["metrics"][-1]["kl_penalty"] > 0.0  # the policy moved away from the reference


@pytest.mark.slow
@pytest.mark.parametrize("name", [s.name for s in list_scenarios()])
def test_catalogue_scenario_meets_its_expected_verdict(default_suite, name: str):
    """Read from the session's one default-suite run (tests/e2e/conftest.py), never re-run per scenario."""
    record = default_suite.scenario(name)
    assert record["passed"], record["findings"]
    assert record["expected"] == record["observed"]


#: What a tag promises about a scenario that trains, read from its step metrics: a claim a scenario can
#: silently stop meeting (three turns under image recency K=2 never drop an image, so never compact).
TAG_CLAIMS = {
    "compaction": ("declares a compaction boundary", lambda ms: any(m[M.PR_DECLARED_BOUNDARIES] > 0 for m in ms)),
    "several-boundaries": ("splits a rollout into three traces or more", lambda ms: any(m[M.ROWS_PER_ROLLOUT_MAX] >= 3 for m in ms)),
    "mask-sample": ("filters a rollout by mask_sample", lambda ms: any(m[M.NUM_MASK_SAMPLE_FILTERED] > 0 for m in ms)),
    "steps": ("trains more than one step", lambda ms: len(ms) >= 2),
    "importance-sampling": ("weights a step by an importance ratio other than 1",
                            lambda ms: any(m["sampling_importance_ratio"] != 1.0 for m in ms)),
    "zero-advantage": ("gives every rollout an advantage of 0",
                       lambda ms: all(m[M.ADVANTAGES_MAX] == 0.0 == m[M.ADVANTAGES_MIN] for m in ms)),
}


@pytest.mark.slow
def test_every_training_scenario_does_what_its_tags_claim(default_suite):
    """A scenario expected to fail is left out: it never trains, so its metrics cannot show the claim."""
    broken = [(s["name"], tag, claim) for s in default_suite.summary["scenarios"] if s["expected"] == "success"
              for tag, (claim, holds) in TAG_CLAIMS.items() if tag in s["tags"] and not holds(s["metrics"])]
    assert broken == []
    counted = {tag: sum(tag in s["tags"] and s["expected"] == "success" for s in default_suite.summary["scenarios"])
               for tag in TAG_CLAIMS}
    assert all(counted.values()), counted  # every claim is checked on at least one scenario


@pytest.mark.compactsim(scenario="image-compaction-k2-rolling", seed=3)
def test_k2_rolling_rows_are_exact_at_another_seed(compactsim_run):
    rec = compactsim_run().record
    assert (rec.seed, rec.steps, rec.rows) == (3, 1, 6)


@pytest.mark.compactsim(scenario="several-boundaries-in-one-rollout")
def test_several_boundaries_give_one_row_per_trace(compactsim_run):
    rec = compactsim_run().record
    assert rec.rows == sum(len(v.rows) for v in rec.traces if v.rollout_id is not None)
    assert all(len(v.rows) > 2 for v in rec.traces if v.rollout_id is not None)
