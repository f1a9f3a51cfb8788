"""Every catalogue scenario meets its expected verdict through the reference backend (via the pytest plugin)."""

from __future__ import annotations

import pytest

from scenarios.catalogue import list_scenarios

pytestmark = [pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

#: Long training runs (the 20-step reference runs) are left to the slow `test_default_suite.py`.
SHORT = [s.name for s in list_scenarios() if s.steps <= 5]


@pytest.mark.parametrize("name", SHORT)
def test_catalogue_scenario_meets_its_expected_verdict(compactsim_run, name: str):
    run = compactsim_run(name)
    assert run.record.passed, run.record.findings
    assert run.record.expected == run.record.observed


@pytest.mark.compactsim(scenario="image-compaction-k2-rolling", seed=3)
def test_k2_rolling_rows_are_exact_at_another_seed(compactsim_run):
    rec = compactsim_run().record
    assert (rec.seed, rec.steps, rec.rows) == (3, 1, 6)


@pytest.mark.compactsim(scenario="several-boundaries-in-one-rollout")
def test_several_boundaries_give_one_row_per_trace(compactsim_run):
    rec = compactsim_run().record
    assert rec.rows == sum(len(v.rows) for v in rec.traces if v.rollout_id is not None)
    assert all(len(v.rows) > 2 for v in rec.traces if v.rollout_id is not None)
