"""`verify_dump` on a hand-made golden: each corruption gives exactly its finding, line order never matters."""

from __future__ import annotations

import json
from typing import Any

import pytest

from compactsim.harness.audit import Tolerances
from compactsim.harness.core.seeds import rng
from compactsim.harness.golden.rows_dump import RowsDumpError, format_dump, parse_metrics_dump, parse_rows_dump
from compactsim.harness.golden.verify import verify_dump, verify_scenario
from tests.unit.golden.golden_builders import dump_lines, golden, golden_scenario, refused_expectation, trainer

METRICS = {"physical_trace_training/num_physical_rows": 3, "advantages/sum": 3.0,
           "physical_trace_training/optimizer_steps": 1, "loss": 0.25}


def verify(lines: list[dict[str, Any]], metrics: list[dict[str, Any]] | None = None, **kw: Any):
    dump = parse_rows_dump(format_dump(lines), source="rows.jsonl")
    m = None if metrics is None else parse_metrics_dump(format_dump(metrics), source="metrics.jsonl")
    return verify_dump(kw.pop("g", None) or golden(), dump, m, **kw)


def findings(lines: list[dict[str, Any]], **kw: Any) -> list[tuple[Any, ...]]:
    return [(f.check, f.step, f.row, f.position, f.expected, f.actual) for f in verify(lines, **kw).findings]


def line(lines: list[dict[str, Any]], trace_id: str) -> dict[str, Any]:
    return next(ln for ln in lines if ln["physical_trace_id"] == trace_id)


def test_verify_passes_a_correct_dump_and_checks_every_field():
    report = verify(dump_lines())
    assert report.passed and report.findings == ()
    (v,) = report.scenarios
    assert (v.report.rows_audited, v.report.tokens_audited, dict(v.not_checked)) == (3, 15, {})
    assert v.reproduce == "compactsim verify goldens rows.jsonl --scenario toy"


def test_verify_corrupted_token_gives_one_row_tokens_finding():
    lines = dump_lines()
    line(lines, "r0/trace-1")["input_ids"][3] = 99
    assert findings(lines) == [("row.tokens", 0, "r0/trace-1", 3, 4, 99)]


def test_verify_flipped_mask_bit_gives_one_row_mask_finding():
    lines = dump_lines()
    line(lines, "r0/trace-1")["token_mask"][3] = 1
    assert findings(lines) == [("row.mask", 0, "r0/trace-1", 3, 0, 1)]


def test_verify_corrupted_advantage_gives_one_row_advantage_finding():
    lines = dump_lines()
    line(lines, "r1/trace-0")["advantages"][3] = 0.5
    assert findings(lines) == [("row.advantage", 0, "r1/trace-0", 3, -0.75, 0.5)]


def test_verify_missing_sentinel_gives_one_row_sentinel_finding():
    lines = dump_lines()
    line(lines, "r0/trace-0")["routed_experts_sentinel_positions"] = []
    assert findings(lines) == [("row.sentinel", 0, "r0/trace-0", 4, -1, None)]


def test_verify_sentinel_declared_off_a_boundary_gives_one_row_sentinel_finding():
    lines = dump_lines()
    line(lines, "r0/trace-1")["routed_experts_sentinel_positions"] = [3]
    assert findings(lines) == [("row.sentinel", 0, "r0/trace-1", 3, "route", -1)]


def test_verify_wrong_media_id_gives_one_row_media_finding():
    lines = dump_lines()
    line(lines, "r0/trace-1")["media_ids"][1] = "m9"
    assert findings(lines) == [("row.media", 0, "r0/trace-1", 1, ["m1", "m2"], ["m1", "m9"])]


def test_verify_wrong_pixels_give_one_row_pixels_finding():
    lines = dump_lines()
    line(lines, "r0/trace-1")["pixel_digests"][0] = "c" * 64
    assert findings(lines) == [("row.pixels", 0, "r0/trace-1", 0, "a" * 64, "c" * 64)]


def test_verify_parent_index_of_another_rollout_gives_a_row_owner_finding():
    lines = dump_lines()
    line(lines, "r1/trace-0")["parent_index"] = 0
    assert findings(lines) == [("row.owner", 0, "r1/trace-0", None, "r1", "r0")]


def test_verify_wrong_rollout_advantage_gives_a_rollout_advantage_finding():
    lines = dump_lines()
    for ln in lines:
        if ln["logical_rollout_id"] == "r1":
            ln["rollout_advantage"] = 0.5
    assert findings(lines) == [("rollout.advantage", 0, None, None, -0.75, 0.5)]


@pytest.mark.parametrize("trace", ["r0/trace-0", "r0/trace-1"])
def test_verify_checks_the_rollout_advantage_of_every_row(trace: str):
    """Each row states its rollout's advantage; only the smallest trace id's was read, so a wrong later trace
    passed (fuzzing round 4)."""
    lines = dump_lines()
    want = line(lines, trace)["rollout_advantage"]
    line(lines, trace)["rollout_advantage"] = 0.0
    assert findings(lines) == [("rollout.advantage", 0, None, None, want, 0.0)]


def test_verify_missing_row_and_missing_padding_are_findings():
    lines = [ln for ln in dump_lines(settings=trainer(1, 2)) if ln["physical_trace_id"] not in ("r1/trace-0", None)]
    report = verify(lines, g=golden(golden_scenario(settings=trainer(1, 2))))
    assert [(f.check, f.row, f.expected, f.actual) for f in report.findings] == [
        ("rows.missing", "r1/trace-0", "r1/trace-0", None),
        ("padding.count", None, 1, 0),
    ]


def test_verify_ignores_line_order_even_with_a_corruption():
    lines = dump_lines(settings=trainer(1, 2))
    line(lines, "r0/trace-0")["input_ids"][0] = 7
    g = golden(golden_scenario(settings=trainer(1, 2)))
    expected = [f.to_json() for f in verify(lines, g=g).findings]
    assert [f["check"] for f in expected] == ["row.tokens"]
    for seed in range(5):
        shuffled = [lines[k] for k in rng(seed, "test.golden.shuffle").permutation(len(lines))]
        assert [f.to_json() for f in verify(shuffled, g=g).findings] == expected


def test_verify_reports_optional_fields_left_out_as_not_checked():
    optional = ("trace_index", "rollout_advantage", "sample_mask", "generation_policy_version", "media_ids",
                "pixel_digests", "routed_experts_sentinel_positions")
    lines = [{k: v for k, v in ln.items() if k not in optional} for ln in dump_lines()]
    report = verify(lines)
    assert report.passed
    assert dict(report.scenarios[0].not_checked) == {
        "trace_index": 3, "rollout_advantage": 2, "generation_policy_version": 3, "media_ids": 3,
        "pixel_digests": 3, "routed_experts_sentinel_positions": 3}  # sample_mask has a default: always checked


def test_verify_checks_metrics_only_when_a_metrics_dump_is_given():
    lines = dump_lines()
    assert verify(lines).passed
    good = [{"scenario": "toy", "step": 0, "metrics": METRICS}]
    assert verify(lines, good).passed
    wrong = [{"scenario": "toy", "step": 0, "metrics": METRICS | {"advantages/sum": 2.5}}]
    assert findings(lines, metrics=wrong) == [("metric.exact", 0, None, None, 3.0, 2.5)]
    assert [f.check for f in verify(lines, []).findings] == ["metric.missing"] * 4  # 2 exact, 1 per step, mean(loss)


def test_verify_run_level_metric_expectation_is_checked():
    bad = [{"scenario": "toy", "step": 0, "metrics": METRICS | {"loss": 11.0}}]
    assert findings(dump_lines(), metrics=bad) == [
        ("metric.expectation", None, None, None, {"metric": "loss", "kind": "max", "value": 10.0, "aggregate": "mean"},
         11.0)]


def test_verify_refused_scenario_passes_with_the_expected_error_line():
    g = golden(golden_scenario(refused_expectation()))
    refusal = {"scenario": "toy-refused", "step": 0, "error": {"code": "incomplete_group", "rollout_id": "r0",
                                                               "turn_id": None}}
    assert verify([refusal], g=g).passed
    assert [f.check for f in verify([], g=g).findings] == ["verdict.expected_error"]
    other = refusal | {"error": {"code": "duplicate_logical_rollout_id"}}
    assert findings([other], g=g) == [("verdict.error_code", 0, None, None, "incomplete_group",
                                       "duplicate_logical_rollout_id")]


def test_verify_error_line_for_a_scenario_that_trains_is_an_unexpected_error():
    refusal = {"scenario": "toy", "step": 0, "error": {"code": "incomplete_group"}}
    assert [f.check for f in verify([refusal]).findings] == ["verdict.unexpected_error"]


def test_verify_scenario_missing_from_the_dump_is_a_step_count_finding():
    assert findings([]) == [("steps.count", None, None, None, 1, 0)]


def test_verify_dump_line_for_an_unknown_scenario_is_malformed():
    lines = dump_lines()
    lines[1] = lines[1] | {"scenario": "other"}
    with pytest.raises(RowsDumpError) as info:
        verify(lines)
    assert (info.value.line, info.value.field) == (2, "scenario")
    assert "'other' is not in the goldens at goldens" in info.value.problem


def test_verify_metrics_line_for_an_unknown_scenario_is_malformed():
    with pytest.raises(RowsDumpError) as info:
        verify(dump_lines(), [{"scenario": "toy", "step": 0, "metrics": {}}, {"scenario": "zzz", "step": 0,
                                                                               "metrics": {}}])
    assert (info.value.source, info.value.line, info.value.field) == ("metrics.jsonl", 2, "scenario")


def test_verify_float32_tolerance_accepts_rounded_logprobs_float64_does_not():
    lines = dump_lines()
    line(lines, "r0/trace-0")["generation_logprobs"][2] = -0.5000001
    assert findings(lines)[0][:4] == ("row.logprobs", 0, "r0/trace-0", 2)
    assert verify(lines, tolerances=Tolerances.for_dtype("float32")).passed


def test_verify_scenario_json_names_rollout_and_dump_lines_of_each_finding():
    lines = dump_lines()
    line(lines, "r1/trace-0")["input_ids"][0] = 2
    dump = parse_rows_dump(format_dump(lines), source="rows.jsonl")
    verdict = verify_scenario(golden_scenario(), dump, None, reproduce="again")
    data = json.loads(json.dumps(verdict.to_json()))
    (f,) = data["findings"]
    assert (f["check"], f["rollout"], f["dump_lines"], f["reproduce"]) == ("row.tokens", "r1", [3], "again")
    assert (data["passed"], data["expected"], data["observed"]) == (False, "success", "success")


def test_verify_duplicate_rows_give_the_same_findings_in_any_order():
    lines = dump_lines()
    twin = json.loads(json.dumps(line(lines, "r1/trace-0")))
    twin["input_ids"][2] = 99
    forward = [f.to_json() for f in verify([*lines, twin]).findings]
    backward = [f.to_json() for f in verify([twin, *reversed(lines)]).findings]
    assert forward == backward
    assert [f["check"] for f in forward] == ["rows.duplicate", "padding.divisibility"]
