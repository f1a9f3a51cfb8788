"""Generated scenarios through agents, planner and materializer agree with the oracle; every mutation is caught.

`COMPACTSIM_PROPERTY_EXAMPLES` scales the example counts (CI default keeps this file well under a minute;
set it to 2000 locally for the thousands-of-scenarios run).
"""

from __future__ import annotations

import os

import pytest

from compactsim.harness.core import metrics as M
from hypothesis import HealthCheck, given, settings

from compactsim.scenarios.mutations import MUTATIONS
from compactsim.scenarios.strategies import adversarial_scenarios, scenarios
from tests.unit.scenarios.scenario_helpers import expected_plan_json, plan_json, row_differences, run_step

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")

EXAMPLES = int(os.environ.get("COMPACTSIM_PROPERTY_EXAMPLES", "60"))
PER_MUTATION = max(2, EXAMPLES // 15)
_SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}


@settings(max_examples=EXAMPLES, **_SETTINGS)
@given(scenarios(max_groups=2, max_group_size=3, max_turns=6))
def test_generated_scenarios_plan_and_materialise_exactly_as_the_oracle_expects(scenario):
    outcome = run_step(scenario)
    assert all(c.status == "completed" for c in outcome.collected), [c.failure for c in outcome.collected]
    assert outcome.expected.error is None
    assert outcome.observed_error is None, outcome.error
    assert plan_json(outcome) == expected_plan_json(outcome)
    assert row_differences(outcome.expected.rows, outcome.batch) == []
    metrics = outcome.batch.metrics()
    for key, value in outcome.expected.exact_metrics.items():
        if key in M.STEP_COUNT_KEYS:
            continue  # counted by the trainer and measured by the harness, not batch properties
        assert metrics[key] == pytest.approx(value, rel=1e-12, abs=1e-12), key


@pytest.mark.parametrize("name", [m.name for m in MUTATIONS])
def test_each_mutation_kind_gives_its_documented_code_at_the_oracles_turn(name):
    code = next(m.code for m in MUTATIONS if m.name == name)

    @settings(max_examples=PER_MUTATION, **_SETTINGS)
    @given(adversarial_scenarios(names=[name], max_group_size=2, max_turns=5))
    def check(scenario):
        outcome = run_step(scenario)
        assert outcome.expected_error is not None and outcome.expected_error[0] == code
        assert outcome.observed_error == outcome.expected_error

    check()
