"""`compactsim run` on the default suite (the whole catalogue, reference runs included) meets every verdict."""

from __future__ import annotations

import pytest

from compactsim.scenarios.catalogue import list_scenarios

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500), pytest.mark.filterwarnings("ignore::DeprecationWarning")]


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
