"""`compactsim run` on the default suite (the whole catalogue, reference runs included) meets every
verdict, scenario by scenario; and two scenarios through the pytest plugin. One file, so one
pytest-xdist worker reads the session's one default-suite run (the other never waits for it)."""

from __future__ import annotations

import pytest

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
    by_name = {s["name"]: s for s in summary["scenarios"]}
    for ref in ("pr-validation-no-compaction", "pr-validation-image-compaction-k2"):
        assert by_name[ref]["steps"] == 20
        assert all(abs(m["token_mult_prob_error"] - 1.0) <= 1e-9 for m in by_name[ref]["metrics"])
    assert (out / "report.html").stat().st_size > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", [s.name for s in list_scenarios()])
def test_catalogue_scenario_meets_its_expected_verdict(default_suite, name: str):
    """Read from the session's one default-suite run (tests/e2e/conftest.py), never re-run per scenario."""
    record = default_suite.scenario(name)
    assert record["passed"], record["findings"]
    assert record["expected"] == record["observed"]


@pytest.mark.compactsim(scenario="image-compaction-k2-rolling", seed=3)
def test_k2_rolling_rows_are_exact_at_another_seed(compactsim_run):
    rec = compactsim_run().record
    assert (rec.seed, rec.steps, rec.rows) == (3, 1, 6)


@pytest.mark.compactsim(scenario="several-boundaries-in-one-rollout")
def test_several_boundaries_give_one_row_per_trace(compactsim_run):
    rec = compactsim_run().record
    assert rec.rows == sum(len(v.rows) for v in rec.traces if v.rollout_id is not None)
    assert all(len(v.rows) > 2 for v in rec.traces if v.rollout_id is not None)
