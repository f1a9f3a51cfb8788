"""Every metric the reference backend reports is either compared by the audit or listed as deliberately not audited.

A metric added to the loss or the trainer without a comparison (or a reason in
`training_checks.UNAUDITED_METRICS`) fails here, so no new metric goes unaudited silently.
"""

from __future__ import annotations

import pytest

from compactsim.harness.audit import training_checks as T
from compactsim.harness.core import metrics as M
from compactsim.harness.core.expectations import ExpectedTrainingStep
from compactsim.harness.oracle.expect import TrainerView, exact_batch_metrics
from compactsim.harness.pipeline.loss import METRIC_KEYS
from compactsim.harness.runner import RunOptions, resolve_scenarios, run_scenario


def _uncovered(keys: set[str]) -> list[str]:
    """Keys neither audited nor listed as not audited, or both at once (a contradiction)."""
    return sorted(k for k in keys if (T.metric_audit(k) is not None) == T.is_unaudited(k))


def test_every_loss_metric_key_is_audited_or_listed():
    assert _uncovered(set(METRIC_KEYS)) == []
    # every loss metric except the loss itself (train.loss) is a train.metric comparison with an oracle value
    compared = {key for key, _, _ in T.REPORTED_LOSS_METRICS}
    assert set(METRIC_KEYS) - compared == {"loss"}
    assert T.metric_audit("loss") == "train.loss"


def test_every_metric_key_declared_in_core_metrics_is_audited_or_listed():
    declared = {getattr(M, name) for name in M.__all__ if isinstance(getattr(M, name), str)}
    declared -= {M.PHYSICAL_PREFIX, M.TIMING_PREFIX}  # prefixes, not keys
    assert _uncovered(declared) == []


def test_each_compared_loss_metric_names_a_value_the_oracle_computes():
    fields = set(ExpectedTrainingStep.__dataclass_fields__)
    assert [attr for _, attr, _ in T.REPORTED_LOSS_METRICS if attr not in fields] == []


def test_keys_audited_as_exact_batch_metrics_are_the_ones_the_oracle_computes():
    view = TrainerView(num_generations_per_prompt=None, leave_one_out=True, normalize=True, clip_low=None,
                       clip_high=None, dp_size=1, micro_batch_size=1, async_mode=False,
                       importance_sampling_correction=False)
    exact = {key for key, check in T.AUDITED_METRICS.items() if check == "metric.exact"}
    assert exact - set(exact_batch_metrics([], [], view)) == set()


@pytest.mark.slow
def test_every_key_a_reference_run_reports_is_audited_or_listed():
    """A real step of the reference backend under truncated importance sampling (so `is_oob_ratio` is there)."""
    rec = run_scenario(resolve_scenarios(["importance-sampling-tis-bounds"])[0], RunOptions()).record
    assert rec.passed, [f.message for f in rec.findings]
    keys = set().union(*(set(m) for m in rec.step_metrics))
    assert {"is_oob_ratio", "sampling_importance_ratio", "probs_ratio_min"} <= keys
    assert _uncovered(keys) == []
