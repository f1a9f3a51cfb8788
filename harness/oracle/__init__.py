"""The independent oracle: a scenario's expected plans, rows, advantages, metrics and errors from ground truth.

It reads the scenario and the agents' ground-truth logs only, never the pipeline (DESIGN §2):
`expect_scenario(scenario, logs_by_step) -> ScenarioExpectation` is the entry point; the
pieces (`read_truth`, `expected_plan`, `expected_rows`, `group_advantages`) are public so other
tools can reuse them on single rollouts.
"""

from harness.oracle.expect import (
    TrainerView,
    batch_error,
    exact_batch_metrics,
    expect_scenario,
    expect_step,
    expected_reward,
    step_error,
)
from harness.oracle.grpo import STD_EPSILON, GroupAdvantages, group_advantages
from harness.oracle.plan import (
    MUTATION_TURNS,
    PlanTruth,
    TraceTruth,
    evidence_error,
    expected_plan,
    mutation_error,
    segment,
)
from harness.oracle.rows import batch_route_layout, expected_rows, pixel_digest_of_data_url, trace_routes
from harness.oracle.truth import CallTruth, RolloutTruth, read_truth

__all__ = [
    "MUTATION_TURNS",
    "STD_EPSILON",
    "CallTruth",
    "GroupAdvantages",
    "PlanTruth",
    "RolloutTruth",
    "TraceTruth",
    "TrainerView",
    "batch_error",
    "batch_route_layout",
    "evidence_error",
    "exact_batch_metrics",
    "expect_scenario",
    "expect_step",
    "expected_plan",
    "expected_reward",
    "expected_rows",
    "group_advantages",
    "mutation_error",
    "pixel_digest_of_data_url",
    "read_truth",
    "segment",
    "step_error",
    "trace_routes",
]
