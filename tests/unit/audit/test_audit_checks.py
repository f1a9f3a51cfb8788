"""Every audit check fires, with the right finding, on one corrupted artifact; a correct artifact gives none."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from compactsim.harness.audit import CHECKS, Finding, ObservedError, ObservedRun, audit_run, observed_from_artifact
from compactsim.harness.audit.checks import Tolerances
from compactsim.harness.core import metrics as M
from compactsim.harness.core.expectations import ExpectedError
from tests.unit.audit.audit_builders import (
    ADV,
    DIGEST,
    ROW_A0,
    ROW_A1,
    S,
    artifact,
    edit,
    expectation,
    expected_step,
    run_of,
    with_arrays,
    with_metrics,
)

REPRO = "compactsim run audit-fixture --seed 7"


def only(findings: tuple[Finding, ...]) -> Finding:
    assert len(findings) == 1, "\n".join(str(f) for f in findings)
    return findings[0]


def audit(*artifacts, steps: int | None = None, **kw):
    exp = expectation(steps if steps is not None else len(artifacts), **kw.pop("exp", {}))
    return audit_run(exp, run_of(*artifacts, **kw))


def test_correct_artifact_has_no_findings():
    report = audit(artifact())
    assert report.findings == ()
    assert report.passed
    assert (report.steps_audited, report.rows_audited, report.tokens_audited) == (1, 3, 36)
    assert report.expected == report.observed == "success"
    assert report.reproduce == REPRO


def test_audit_is_independent_of_row_order():
    assert audit(artifact(order=(2, 0, 1))).findings == ()
    assert audit(artifact(order=(1, 2, 0))).findings == ()


def test_token_corruption_names_row_position_expected_and_actual():
    f = only(audit(edit(artifact(), "row_input_ids", (0, 5), 99)).findings)
    assert (f.check, f.step, f.row, f.position, f.expected, f.actual) == ("row.tokens", 0, "r-a/trace-0", 5, 41, 99)
    assert f.scenario == "audit-fixture"
    assert f.reproduce == REPRO
    assert "1 of 14 token ids differ; first at position 5" in f.message


def test_row_length_change_is_reported():
    a = edit(artifact(), "row_input_lengths", (1,), 9)
    f = only(audit(a).findings)
    assert (f.check, f.row, f.expected, f.actual) == ("row.length", "r-a/trace-1", 10, 9)


def test_mask_bit_flip_is_reported_at_its_position():
    a = edit(artifact(), "row_token_mask", (2, 9), 1)
    findings = audit(a).findings
    assert [(f.check, f.row, f.position, f.expected, f.actual) for f in findings] == [
        ("row.mask", "r-b/trace-0", 9, 0, 1),
    ]


def test_behaviour_logprob_misalignment_is_reported():
    lp = artifact().arrays["row_generation_logprobs"].copy()
    lp[0, 4:7] = lp[0, 5:8]  # shifted by one position
    f = only(audit(with_arrays(artifact(), row_generation_logprobs=lp)).findings)
    assert (f.check, f.row, f.position) == ("row.logprobs", "r-a/trace-0", 4)
    assert f.expected == ROW_A0.generation_logprobs[0]
    assert f.actual == ROW_A0.generation_logprobs[1]


def test_broadcast_first_advantage_is_reported_on_the_other_rollout():
    adv = artifact().arrays["row_advantages"].copy()
    mask = artifact().arrays["row_token_mask"] != 0
    adv[mask] = ADV  # the first logical advantage on every row
    f = only(audit(with_arrays(artifact(), row_advantages=adv)).findings)
    assert (f.check, f.row, f.position, f.expected, f.actual) == ("row.advantage", "r-b/trace-0", 4, -ADV, ADV)


def test_advantage_off_the_mask_is_reported():
    f = only(audit(edit(artifact(), "row_advantages", (1, 2), 0.5)).findings)
    assert (f.check, f.row, f.position, f.expected, f.actual) == ("row.advantage_off_mask", "r-a/trace-1", 2, 0.0, 0.5)


def test_advantage_broadcast_over_the_whole_row_is_accepted_as_nemo_rl_writes_it():
    a = artifact()
    adv = a.arrays["row_advantages"].copy()
    adv[1, :] = adv[1, a.row_mask_spans[1][0][0]]  # the parent's advantage on every position, as NeMo-RL broadcasts
    assert audit(with_arrays(a, row_advantages=adv)).findings == ()


def test_advantage_zeroed_only_on_some_off_mask_positions_is_accepted():
    """A trainer that broadcasts the advantage, then zeroes its padding, holds both forms in one row (docs/golden-spec.md)."""
    a = artifact()
    adv = a.arrays["row_advantages"].copy()
    parent = adv[1, a.row_mask_spans[1][0][0]]
    adv[1, :] = parent
    adv[1, -2:] = 0.0
    assert parent != 0.0 and audit(with_arrays(a, row_advantages=adv)).findings == ()


def test_logical_advantage_is_checked_per_rollout():
    a = artifact()
    logical = (dict(a.logical[0]), {**a.logical[1], "advantage": 0.0})
    f = only(audit(replace(a, logical=logical)).findings)
    assert (f.check, f.row, f.expected, f.actual) == ("rollout.advantage", None, -ADV, 0.0)


def test_parent_index_pointing_at_another_rollout_is_an_ownership_finding():
    f = only(audit(edit(artifact(), "parent_indices", (1,), 1)).findings)
    assert (f.check, f.row, f.expected, f.actual) == ("row.owner", "r-a/trace-1", "r-a", "r-b")


def test_wrong_logical_label_is_an_ownership_finding():
    a = artifact()
    a = replace(a, row_logical_rollout_id=("r-a", "r-b", "r-b", None))
    f = only(audit(a).findings)
    assert (f.check, f.row, f.expected, f.actual) == ("row.owner", "r-a/trace-1", "r-a", "r-b")


def test_trace_index_is_checked():
    f = only(audit(edit(artifact(), "row_trace_index", (1,), 0)).findings)
    assert (f.check, f.row, f.expected, f.actual) == ("row.trace_index", "r-a/trace-1", 1, 0)


def test_missing_and_unexpected_rows_are_reported_by_physical_trace_id():
    a = artifact()
    a = replace(a, row_physical_trace_id=("r-a/trace-0", "r-a/trace-9", "r-b/trace-0", None))
    findings = audit(a).findings
    assert [(f.check, f.row) for f in findings] == [("rows.missing", "r-a/trace-1"), ("rows.unexpected", "r-a/trace-9")]


def test_duplicate_physical_trace_ids_are_reported():
    a = replace(artifact(), row_physical_trace_id=("r-a/trace-0", "r-a/trace-0", "r-b/trace-0", None))
    checks = [(f.check, f.row) for f in audit(a).findings]
    assert ("rows.duplicate", "r-a/trace-0") in checks
    assert ("rows.missing", "r-a/trace-1") in checks


def test_sample_mask_of_a_row_is_checked():
    f = only(audit(edit(artifact(), "row_sample_mask", (2,), 0.0)).findings)
    assert (f.check, f.row, f.expected, f.actual) == ("row.sample_mask", "r-b/trace-0", 1.0, 0.0)


def test_generation_policy_version_is_checked():
    f = only(audit(edit(artifact(), "row_generation_policy_version", (0,), 3)).findings)
    assert (f.check, f.row, f.expected, f.actual) == ("row.policy_version", "r-a/trace-0", 0, 3)


def test_owning_only_new_images_after_a_boundary_is_a_media_finding():
    a = replace(artifact(), row_media_ids=(("m1", "m2"), ("m3",), ("m1",), ()),
                row_pixel_digests=((DIGEST["m1"], DIGEST["m2"]), (DIGEST["m3"],), (DIGEST["m1"],), ()))
    f = only(audit(a).findings)
    assert (f.check, f.row, f.position, f.expected, f.actual) == ("row.media", "r-a/trace-1", 0, ["m2", "m3"], ["m3"])


def test_wrong_pixels_under_the_right_media_id_are_reported():
    a = replace(artifact(), row_pixel_digests=((DIGEST["m1"], DIGEST["m2"]), (DIGEST["m2"], DIGEST["m1"]),
                                               (DIGEST["m1"],), ()))
    f = only(audit(a).findings)
    assert (f.check, f.row, f.position, f.expected, f.actual) == ("row.pixels", "r-a/trace-1", 1, DIGEST["m3"], DIGEST["m1"])


def test_dropped_boundary_sentinel_is_reported_with_the_placeholder():
    a = edit(artifact(), "routed_experts", (0, 13), np.array([[0, 1]], dtype=np.int32))
    f = only(audit(a).findings)
    assert (f.check, f.row, f.position, f.expected, f.actual) == ("row.sentinel", "r-a/trace-0", 13, -1, [[0, 1]])


def test_sentinel_on_a_repaired_position_is_reported():
    a = edit(artifact(), "routed_experts", (2, 7), -1)
    f = only(audit(a).findings)
    assert (f.check, f.row, f.position, f.actual) == ("row.sentinel", "r-b/trace-0", 7, -1)


def test_unrepaired_route_is_a_route_finding():
    a = edit(artifact(), "routed_experts", (0, 6), np.array([[0, 1]], dtype=np.int32))
    want = ROW_A0.routes[6].tolist()
    assert want != [[0, 1]]
    f = only(audit(a).findings)
    assert (f.check, f.row, f.position, f.expected, f.actual) == ("row.route", "r-a/trace-0", 6, want, [[0, 1]])


def test_declared_sentinels_are_checked_when_the_step_has_no_routes():
    a = artifact()
    arrays = {k: v for k, v in a.arrays.items() if k != "routed_experts"}
    a = replace(a, arrays=arrays, row_sentinel_positions=((), (9,), (), ()))
    checks = [(f.check, f.row, f.position) for f in audit(a).findings]
    assert checks == [("row.sentinel", "r-a/trace-0", 13), ("row.sentinel", "r-a/trace-1", 9)]


def test_declared_sentinel_on_a_repaired_position_is_one_finding_naming_both_facts():
    a = artifact()
    arrays = {k: v for k, v in a.arrays.items() if k != "routed_experts"}
    a = replace(a, arrays=arrays, row_sentinel_positions=((13,), (), (7,), ()))
    f = only(audit(a).findings)
    assert (f.check, f.row, f.position, f.expected, f.actual) == ("row.sentinel", "r-b/trace-0", 7, "repaired route", -1)
    assert f.message == ("position 7 is declared a sentinel but is no boundary; its placeholder must be repaired "
                         "from the next call's prefill")


def test_padding_row_with_weight_is_reported():
    f = only(audit(edit(artifact(), "row_token_mask", (3, 0), 1)).findings)
    assert f.check == "padding.weight" and f.message.startswith("padding row 3 has mask sum 1.0")
    assert (f.actual["mask_sum"], f.actual["sample_mask"], f.expected["mask_sum"]) == (1.0, 0.0, 0.0)


def test_padding_before_a_real_row_is_reported():
    a = artifact()
    order = [0, 1, 3, 2]
    arrays = {k: v[order] for k, v in a.arrays.items()}
    pick = lambda t: tuple(t[i] for i in order)  # noqa: E731
    a = replace(a, arrays=arrays, row_logical_rollout_id=pick(a.row_logical_rollout_id),
                row_physical_trace_id=pick(a.row_physical_trace_id), row_mask_spans=pick(a.row_mask_spans),
                row_media_ids=pick(a.row_media_ids), row_pixel_digests=pick(a.row_pixel_digests),
                row_sentinel_positions=pick(a.row_sentinel_positions))
    f = only(audit(a).findings)
    assert (f.check, f.row, f.actual) == ("padding.order", "r-b/trace-0", 2)


def test_indivisible_row_count_and_excess_padding_are_reported():
    findings = audit(replace(artifact(), dp_size=3)).findings
    assert [(f.check, f.expected, f.actual) for f in findings] == [
        ("padding.divisibility", "multiple of 3", 4),
        ("padding.count", 0, 1),
    ]


def test_more_than_one_optimizer_step_or_scheduler_increment_is_reported():
    findings = audit(replace(artifact(), optimizer_steps=3, scheduler_increments=3)).findings
    assert [(f.check, f.expected, f.actual) for f in findings] == [
        ("counts.optimizer", 1, 3), ("counts.scheduler", 1, 3),
    ]


def test_cumulative_scheduler_count_must_grow_by_one_per_step():
    a0, a1 = artifact(0), with_metrics(artifact(1), {M.SCHEDULER_STEP_COUNT: 4})
    f = only(audit(a0, a1).findings)
    assert (f.check, f.step, f.expected, f.actual) == ("counts.scheduler", 1, 2, 4)


def test_counting_padding_tokens_is_an_exact_metric_finding():
    f = only(audit(with_metrics(artifact(), {M.TOTAL_NUM_TOKENS: 42})).findings)
    assert (f.check, f.step, f.expected, f.actual) == ("metric.exact", 0, 36.0, 42.0)
    assert M.TOTAL_NUM_TOKENS in f.message


def test_missing_exact_metric_is_reported():
    a = artifact()
    a = replace(a, metrics={k: v for k, v in a.metrics.items() if k != M.NUM_PADDING_ROWS})
    f = only(audit(a).findings)
    assert (f.check, f.expected, f.actual) == ("metric.missing", 1.0, None)


def test_step_expectation_max_abs_dev_fires():
    f = only(audit(with_metrics(artifact(), {M.TOKEN_MULT_PROB_ERROR: 1.0 + 2e-9})).findings)
    assert (f.check, f.step, f.actual) == ("metric.expectation", 0, 1.0 + 2e-9)
    assert f.expected == {"metric": M.TOKEN_MULT_PROB_ERROR, "kind": "max_abs_dev", "value": 1e-9, "reference": 1.0}


def test_run_level_expectation_is_evaluated_once_over_all_steps():
    a0 = with_metrics(artifact(0), {M.TOKEN_MULT_PROB_ERROR: 1.0})
    a1 = with_metrics(artifact(1), {M.TOKEN_MULT_PROB_ERROR: 1.0})
    assert audit(a0, a1).findings == ()
    exp = expectation(2)
    drifted = tuple(replace(s, metric_expectations=()) for s in exp.steps)
    from compactsim.harness.core.expectations import MetricExpectation

    drifted = (replace(drifted[0], metric_expectations=(
        MetricExpectation(M.TOKEN_MULT_PROB_ERROR, "max", value=0.5, aggregate="mean"),)),) + drifted[1:]
    report = audit_run(replace(exp, steps=drifted), run_of(a0, a1))
    f = only(report.findings)
    assert (f.check, f.step, f.actual) == ("metric.expectation", None, 1.0)


def test_run_that_stops_early_is_a_step_count_finding():
    f = only(audit(artifact(0), steps=2).findings)
    assert (f.check, f.step, f.expected, f.actual) == ("steps.count", None, 2, 1)


def test_unexpected_error_is_reported_with_its_step():
    err = ObservedError("undeclared_discontinuity", "r-a", 3, 0, "plan", "prompt of turn 3 does not extend")
    report = audit_run(expectation(1), ObservedRun(steps=(), error=err))
    f = only(report.findings)
    assert (f.check, f.step, f.expected, f.actual) == ("verdict.unexpected_error", 0, "success", "undeclared_discontinuity")
    assert report.observed == "error:undeclared_discontinuity"


@pytest.mark.parametrize(("declared", "derived", "said", "found"), [
    (("error", "incomplete_group", None), None, "error incomplete_group", "success"),
    (("success", None, None), ExpectedError("evidence_digest_mismatch", "r-a", 2), "success",
     "error evidence_digest_mismatch at turn 2"),
    (("error", "turn_order", None), ExpectedError("evidence_digest_mismatch", "r-a", 2), "error turn_order",
     "error evidence_digest_mismatch at turn 2"),
    (("error", "evidence_digest_mismatch", 3), ExpectedError("evidence_digest_mismatch", "r-a", 2),
     "error evidence_digest_mismatch at turn 3", "error evidence_digest_mismatch at turn 2"),
])
def test_a_scenario_whose_declared_expect_disagrees_with_the_oracle_is_a_finding(declared, derived, said, found):
    """A user's scenario file that expects the wrong verdict must not pass on the oracle's word alone."""
    want = expectation(1, error=derived)
    run = run_of(artifact()) if derived is None else ObservedRun(steps=(), error=ObservedError(
        derived.code, derived.rollout_id, derived.turn_id, 0, "plan", "x"))
    report = audit_run(want, run, declared=declared)
    f = only(report.findings)
    assert (f.check, f.expected, f.actual) == ("scenario.declared_verdict", found, said)
    agreeing = ("success", None, None) if derived is None else ("error", derived.code, None)
    assert audit_run(want, run, declared=agreeing).findings == ()


def test_the_oracles_cause_is_named_in_the_declared_verdict_and_missing_error_findings():
    """An empty batch because every rollout failed during collection: the finding says so, the JSON stays the code's."""
    cause = "2 of the 2 rollouts of step 0 failed during collection; the first, s0-g0-r0, at turn 2: evidence_violation: x"
    want = ExpectedError("no_eligible_tokens", None, None, cause=cause)
    assert want == ExpectedError("no_eligible_tokens", None, None) and "cause" not in want.to_json()
    refused = ObservedRun(steps=(), error=ObservedError("no_eligible_tokens", None, None, 0, "materialize", "empty"))
    f = only(audit_run(expectation(1, error=want), refused, declared=("success", None, None)).findings)
    assert f.check == "scenario.declared_verdict"
    assert f.message == ("the scenario declares expect: success, but its script, faults and mutations lead to error "
                         f"no_eligible_tokens ({cause}); fix the scenario's expect (or report an oracle bug)")
    f = only(audit_run(expectation(1, error=want), run_of(artifact())).findings)
    assert (f.check, f.message) == ("verdict.expected_error", "the run succeeded; it must be refused with "
                                    f"no_eligible_tokens (rollout None, turn None): {cause}")


def test_the_normaliser_allowance_adds_1e8_over_n_to_the_step_tolerances_only():
    tol = Tolerances()
    assert tol.for_normaliser(0.0) is tol
    four = tol.for_normaliser(4.0)
    assert (four.loss_rtol, four.grad_norm_rtol, four.gradient_rtol, four.gradient_norm_rtol) == (
        1e-9 + 2.5e-9, 1e-9 + 2.5e-9, 1e-9 + 2.5e-9, 1e-9 + 2.5e-9)
    assert (four.metric_rtol, four.advantage_rtol, four.update_rtol, four.lr_rtol) == (
        tol.metric_rtol, tol.advantage_rtol, tol.update_rtol, tol.lr_rtol)


def test_expected_error_that_never_comes_is_reported():
    want = ExpectedError("evidence_digest_mismatch", "r-a", 2)
    report = audit_run(expectation(1, error=want), run_of(artifact()))
    f = only(report.findings)
    assert (f.check, f.actual) == ("verdict.expected_error", "success")
    assert report.expected == "error:evidence_digest_mismatch"


def test_expected_error_with_another_code_or_location_is_reported():
    want = ExpectedError("evidence_digest_mismatch", "r-a", 2)
    wrong_code = ObservedError("turn_order", "r-a", 2, 0, "plan", "x")
    wrong_turn = ObservedError("evidence_digest_mismatch", "r-a", 3, 0, "plan", "x")
    right = ObservedError("evidence_digest_mismatch", "r-a", 2, 0, "plan", "x")
    exp = expectation(0, error=want)
    assert only(audit_run(exp, ObservedRun((), wrong_code)).findings).check == "verdict.error_code"
    f = only(audit_run(exp, ObservedRun((), wrong_turn)).findings)
    assert (f.check, f.expected, f.actual) == (
        "verdict.error_location", {"rollout_id": "r-a", "turn_id": 2}, {"rollout_id": "r-a", "turn_id": 3})
    assert audit_run(exp, ObservedRun((), right)).passed


def test_expected_error_without_a_location_accepts_any_rollout():
    exp = expectation(0, error=ExpectedError("incomplete_group", None, None))
    assert audit_run(exp, ObservedRun((), ObservedError("incomplete_group", "r-b", None, 0, "materialize", ""))).passed


def test_reproduction_command_names_the_backend():
    report = audit_run(expectation(1), run_of(edit(artifact(), "row_input_ids", (0, 5), 99)),
                       backend="tests.quality.broken:Backend")
    assert report.findings[0].reproduce == (
        "compactsim run audit-fixture --seed 7 --backend tests.quality.broken:Backend")


def test_float32_tolerance_accepts_rounded_logprobs_but_float64_does_not():
    lp = artifact().arrays["row_generation_logprobs"]
    rounded = lp.astype(np.float32).astype(np.float64)
    a = with_arrays(artifact(), row_generation_logprobs=rounded)
    assert audit_run(expectation(1), run_of(a), tolerances=Tolerances.for_dtype("float32")).passed
    assert {f.check for f in audit(a).findings} == {"row.logprobs"}


def test_every_check_has_a_meaning():
    assert all(isinstance(v, str) and v for v in CHECKS.values())
    with pytest.raises(ValueError, match="unknown audit check"):
        Finding("s", 0, "row.nope", None, None, 1, 2, "m", "r")


def test_findings_round_trip_through_json():
    report = audit(edit(artifact(), "row_input_ids", (0, 5), 99))
    data = report.to_json()
    assert Finding.from_json(data["findings"][0]) == report.findings[0]
    assert data["passed"] is False


def test_observed_pixel_digests_can_replace_the_artifacts():
    a = artifact()
    obs = observed_from_artifact(a, pixel_digests=[("x", "y"), ROW_A1.pixel_digests, ("z",), ()])
    assert obs.rows[0].pixel_digests == ("x", "y")
    with pytest.raises(ValueError, match="pixel_digests has 1 rows; the artifact has 4"):
        observed_from_artifact(a, pixel_digests=[()])


def _with_run_expectations(steps: int, *exps):
    exp = expectation(steps)
    return replace(exp, metric_expectations=tuple(exps))


def test_all_aggregate_reports_the_first_failing_step():
    from compactsim.harness.core.expectations import MetricExpectation

    a0 = artifact(0)
    a1 = with_metrics(artifact(1), {M.GRAD_NORM: 0.0})
    a0 = with_metrics(a0, {M.GRAD_NORM: 1.0})
    exp = _with_run_expectations(2, MetricExpectation(M.GRAD_NORM, "min", value=0.5, aggregate="all"))
    f = only(audit_run(exp, run_of(a0, a1)).findings)
    assert (f.check, f.step, f.actual) == ("metric.expectation", 1, 0.0)
    assert "all(grad_norm) >= 0.5 fails at step 1" in f.message


def test_mean_and_any_aggregates_check_the_series():
    from compactsim.harness.core.expectations import MetricExpectation

    a0 = with_metrics(artifact(0), {M.GRAD_NORM: 1.0})
    a1 = with_metrics(artifact(1), {M.GRAD_NORM: 3.0})
    ok = _with_run_expectations(2, MetricExpectation(M.GRAD_NORM, "equals", value=2.0, aggregate="mean"),
                                MetricExpectation(M.GRAD_NORM, "min", value=2.5, aggregate="any"))
    assert audit_run(ok, run_of(a0, a1)).passed
    bad = _with_run_expectations(2, MetricExpectation(M.GRAD_NORM, "max", value=1.5, aggregate="mean"))
    f = only(audit_run(bad, run_of(a0, a1)).findings)
    assert (f.check, f.step, f.actual) == ("metric.expectation", None, 2.0)
    assert f.expected == {"metric": M.GRAD_NORM, "kind": "max", "value": 1.5, "aggregate": "mean"}


def test_run_expectation_on_an_unreported_metric_is_missing():
    from compactsim.harness.core.expectations import MetricExpectation

    exp = _with_run_expectations(1, MetricExpectation("loss/pg", "max", value=1.0, aggregate="mean"))
    f = only(audit_run(exp, run_of(artifact())).findings)
    assert (f.check, f.step, f.actual) == ("metric.missing", None, None)
    exp = _with_run_expectations(1, MetricExpectation("loss/pg", "max", value=1.0, aggregate="all"))
    assert only(audit_run(exp, run_of(artifact())).findings).check == "metric.missing"


def test_a_reported_reward_is_the_mean_over_logical_rollouts_not_rows():
    """Rollout r-a (reward 1) has two rows, r-b (reward 0) one: 0.5 passes, the mean over rows (2/3) is named."""
    assert audit(with_metrics(artifact(), {"reward": 0.5})).findings == ()
    f = only(audit(with_metrics(artifact(), {"reward": 2 / 3})).findings)
    assert (f.check, f.step, f.expected, f.actual) == ("train.metric", 0, 0.5, 2 / 3)
    assert f.message.startswith("reward = 0.6666666666666666; the mean reward of the step's 2 logical rollouts is 0.5")
    assert f.message.endswith("(it is their mean over physical rows, which weighs a split rollout by its rows)")


def test_a_reported_reward_may_carry_float32_rounding_and_a_wrong_one_is_named_as_it_is():
    """NeMo-RL's driver holds rewards in a float32 tensor and logs np.mean of it: within 2^-16 of the largest
    |reward| passes; beyond, the finding does not call the value a mean over rows when it is not one."""
    assert audit(with_metrics(artifact(), {"reward": 0.5 + 1e-6})).findings == ()
    f = only(audit(with_metrics(artifact(), {"reward": 0.5 + 1e-3})).findings)
    assert (f.check, f.expected, f.actual) == ("train.metric", 0.5, 0.5 + 1e-3)
    assert f.message == "reward = 0.501; the mean reward of the step's 2 logical rollouts is 0.5"


def test_advantage_metrics_accept_the_float32_rounding_of_nemo_rls_own_logging():
    """NeMo-RL logs advantages/* from advantages.float() (§3.7): a float32-rounded value passes, a wrong one does not."""
    from compactsim.harness.audit.checks import check_exact_metrics, float32_logging_bound
    from compactsim.harness.audit.observed import ObservedStep

    step = replace(expected_step(), exact_metrics={M.ADVANTAGES_MEAN: ADV, M.ADVANTAGES_SUM: 3 * S * ADV})
    assert float32_logging_bound(M.NUM_PHYSICAL_ROWS, step) == 0.0
    assert float32_logging_bound(M.ADVANTAGES_MEAN, step) == 2.0**-16 * ADV
    as_float32 = float(np.float32(ADV))
    reporter = lambda check, message, **kw: (check, kw.get("actual"))  # noqa: E731
    for got, found in ((as_float32, []), (ADV * (1 + 1e-3), [("metric.exact", ADV * (1 + 1e-3))])):
        observed = ObservedStep(step=0, rows=(), logical=(), metrics={M.ADVANTAGES_MEAN: got, M.ADVANTAGES_SUM: 3 * S * ADV})
        assert check_exact_metrics(reporter, step, observed, Tolerances()) == found
