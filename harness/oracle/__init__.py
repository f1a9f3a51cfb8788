"""The independent oracle: a scenario's expected plans, rows, advantages, metrics and errors from ground truth.

It reads the scenario and the agents' ground-truth logs only, never the pipeline (DESIGN §2):
`expect_scenario(scenario, logs_by_step) -> ScenarioExpectation` is the entry point; the
pieces (`read_truth`, `expected_plan`, `expected_rows`, `group_advantages`) are public so other
tools can reuse them on single rollouts. `expect_training(settings, expectation, logs, measured)`
adds the training step itself: loss, gradient norm, learning rate and the updated weights, from the
weights the harness measured before each step (`compactsim.harness.oracle.step`).
"""

from compactsim.harness.oracle.expect import (
    TrainerView,
    batch_error,
    exact_batch_metrics,
    expect_scenario,
    expect_step,
    expected_reward,
    step_error,
)
from compactsim.harness.oracle.grpo import STD_EPSILON, GroupAdvantages, group_advantages
from compactsim.harness.oracle.plan import (
    MUTATION_TURNS,
    PlanTruth,
    TraceTruth,
    evidence_error,
    expected_plan,
    mutation_error,
    segment,
)
from compactsim.harness.oracle.routes import CallRoutes, RowRoutes, expected_row_routes
from compactsim.harness.oracle.rows import batch_route_layout, expected_rows, pixel_digest_of_data_url, trace_routes
from compactsim.harness.oracle.step import expected_step
from compactsim.harness.oracle.step_settings import LossSettings, OptimizerSettings, StepSettings
from compactsim.harness.oracle.training import expect_training
from compactsim.harness.oracle.truth import CallTruth, RolloutTruth, read_truth

__all__ = [
    "MUTATION_TURNS",
    "STD_EPSILON",
    "CallRoutes",
    "CallTruth",
    "GroupAdvantages",
    "LossSettings",
    "OptimizerSettings",
    "PlanTruth",
    "RolloutTruth",
    "RowRoutes",
    "StepSettings",
    "TraceTruth",
    "TrainerView",
    "batch_error",
    "batch_route_layout",
    "evidence_error",
    "exact_batch_metrics",
    "expect_scenario",
    "expect_step",
    "expect_training",
    "expected_plan",
    "expected_reward",
    "expected_row_routes",
    "expected_rows",
    "expected_step",
    "group_advantages",
    "mutation_error",
    "pixel_digest_of_data_url",
    "read_truth",
    "segment",
    "step_error",
    "trace_routes",
]
