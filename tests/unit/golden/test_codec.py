"""Golden encoding of the oracle's expectation: exact row lines, padding, and an exact round trip."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import numpy as np
import pytest

from compactsim.harness.audit import Tolerances
from compactsim.harness.core.errors import ConfigError
from compactsim.harness.golden.codec import (
    PayloadGroup,
    TrainerSettings,
    expectation_document,
    expectation_from_document,
    json_document,
    json_lines,
    padding_rows,
    payload_file,
    row_from_line,
    row_line,
    rows_file,
    step_row_lines,
)
from compactsim.harness.golden.schema import validator
from tests.unit.golden.golden_builders import DIGEST_A, DIGEST_B, expectation, refused_expectation, rows, trainer

TOLERANCES = Tolerances.for_dtype("float32").rows_and_metrics()


def test_row_line_spreads_logprobs_and_advantage_over_the_mask():
    assert row_line("toy", 0, rows()[1], parent_index=0) == {
        "scenario": "toy", "step": 0, "physical_trace_id": "r0/trace-1", "logical_rollout_id": "r0",
        "parent_index": 0, "trace_index": 1, "input_ids": [1, 3, 20, 4, 21, 22], "mask_spans": [[2, 3], [4, 6]],
        "generation_logprobs": [0.0, 0.0, -0.125, 0.0, -2.0, -0.5],
        "advantages": [0.0, 0.0, 0.75, 0.0, 0.75, 0.75], "rollout_advantage": 0.75, "sample_mask": 1.0,
        "generation_policy_version": 0, "media_ids": ["m1", "m2"], "pixel_digests": [DIGEST_A, DIGEST_B],
        "routed_experts_sentinel_positions": [], "routed_experts_repaired_positions": [2], "routed_experts": None,
    }


def test_row_routes_are_written_as_nested_lists_and_read_back_exactly():
    routes = np.arange(6 * 2 * 3, dtype=np.int64).reshape(6, 2, 3) % 5 - 1
    row = replace(rows()[1], routes=routes)
    line = row_line("toy", 0, row, parent_index=0)
    assert line["routed_experts"][2] == [[1, 2, 3], [-1, 0, 1]]  # ids 12..17 mod 5, minus 1
    assert list(validator("expected-rows").iter_errors(line)) == []
    back = row_from_line(json.loads(json.dumps(line)))
    assert back.routes is not None and back.routes.dtype == np.int64
    assert np.array_equal(back.routes, routes)
    assert row_from_line(row_line("toy", 0, rows()[1], parent_index=0)).routes is None


def test_step_row_lines_put_parent_indices_then_padding_last():
    step = expectation().steps[0]
    lines = step_row_lines("toy", step, trainer(dp_size=1, micro_batch_size=2))
    assert [(ln["physical_trace_id"], ln["parent_index"]) for ln in lines] == [
        ("r0/trace-0", 0), ("r0/trace-1", 0), ("r1/trace-0", 1), (None, -1)]
    assert lines[-1]["input_ids"] == [] and lines[-1]["sample_mask"] == 0.0


@pytest.mark.parametrize(("dp", "mbs", "pad"), [(1, 1, 0), (1, 2, 1), (2, 2, 1), (1, 3, 0), (5, 1, 2)])
def test_padding_rows_reach_a_multiple_of_dp_times_microbatch(dp, mbs, pad):
    assert padding_rows(expectation().steps[0], trainer(dp, mbs)) == pad


def test_expected_row_lines_match_their_schema():
    v = validator("expected-rows")
    for line in step_row_lines("toy", expectation().steps[0], trainer(1, 2)):
        assert list(v.iter_errors(line)) == []


def test_expectation_round_trips_exactly_through_the_golden_documents():
    exp = expectation()
    settings = trainer()
    groups = [[PayloadGroup(0, payload_file(0, 0), 2)]]
    doc = json.loads(json_document(expectation_document(exp, purpose="a toy", trainer=settings, payloads=groups,
                                                        tolerances=TOLERANCES)))
    assert list(validator("expectation").iter_errors(doc)) == []
    lines = [json.loads(x) for x in json_lines(step_row_lines("toy", exp.steps[0], settings)).splitlines()]
    back = expectation_from_document(doc, {0: lines})
    assert back.to_json() == exp.to_json()
    assert [r.repaired_positions for r in back.steps[0].rows] == [(), (2,), ()]
    assert TrainerSettings.from_json(doc["trainer"]) == settings
    assert doc["tolerances"] == TOLERANCES and sorted(TOLERANCES) == [
        "advantage_atol", "advantage_rtol", "logprob_atol", "logprob_rtol", "metric_atol", "metric_rtol"]
    assert doc["steps"][0]["rows"] == {"file": rows_file(0), "real": 3, "padding": 0}
    assert [r["parent_index"] for r in doc["steps"][0]["rollouts"]] == [0, 1]


def test_refused_step_has_no_rows_file_and_no_parent_indices():
    exp = refused_expectation()
    doc = expectation_document(exp, purpose="p", trainer=trainer(), payloads=[[]], tolerances=TOLERANCES)
    step = doc["steps"][0]
    assert step["rows"] == {"file": None, "real": 0, "padding": 0}
    assert step["error"] == {"code": "incomplete_group", "rollout_id": "r0", "turn_id": None}
    assert [r["parent_index"] for r in step["rollouts"]] == [None]
    assert expectation_from_document(json.loads(json_document(doc)), {}).to_json() == exp.to_json()


def test_expectation_document_needs_one_payload_list_per_step():
    with pytest.raises(ConfigError, match="0 payload lists for 1 steps"):
        expectation_document(expectation(), purpose="p", trainer=trainer(), payloads=[], tolerances=TOLERANCES)


def test_golden_encodings_are_fixed_bytes():
    assert json_document({"b": 1, "a": [1, 2]}) == b'{\n  "b": 1,\n  "a": [\n    1,\n    2\n  ]\n}\n'
    assert json_lines([{"b": 1, "a": "\u00e9"}], sort_keys=True) == '{"a":"\u00e9","b":1}\n'.encode()
    with pytest.raises(ValueError):
        json_lines([{"x": float("nan")}])
