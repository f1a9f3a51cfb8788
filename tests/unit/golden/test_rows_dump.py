"""The rows-dump and metrics-dump parsers: exact values for valid lines, line and field for every malformed one."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.golden.rows_dump import (
    RowsDumpError,
    format_dump,
    metrics_line,
    parse_metrics_dump,
    parse_rows_dump,
    read_rows_dump,
)

DIGEST = "ab" * 32


def row(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "scenario": "s", "step": 0, "physical_trace_id": "r0/trace-0", "logical_rollout_id": "r0",
        "parent_index": 0, "input_ids": [5, 6, 7, 8], "token_mask": [0, 0, 1, 1],
        "generation_logprobs": [0.0, 0.0, -0.5, -1.25], "advantages": [0.0, 0.0, 0.75, 0.75],
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not ...}


def text(*lines: Any) -> str:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)


def problem(*lines: Any) -> RowsDumpError:
    with pytest.raises(RowsDumpError) as info:
        parse_rows_dump(text(*lines), source="dump.jsonl")
    return info.value


def test_rows_dump_parses_a_minimal_row_with_exact_values():
    dump = parse_rows_dump(text(row()), source="dump.jsonl")
    (r,) = dump.rows
    assert (r.line, r.scenario, r.step, r.physical_trace_id, r.logical_rollout_id, r.parent_index) == (
        1, "s", 0, "r0/trace-0", "r0", 0)
    assert r.input_ids.tolist() == [5, 6, 7, 8]
    assert r.token_mask.tolist() == [0.0, 0.0, 1.0, 1.0]
    assert r.generation_logprobs.tolist() == [0.0, 0.0, -0.5, -1.25]
    assert r.advantages.tolist() == [0.0, 0.0, 0.75, 0.75]
    assert (r.trace_index, r.rollout_advantage, r.sample_mask, r.media_ids, r.pixel_digests, r.sentinel_positions) == (
        None, None, None, None, None, None)
    assert dump.errors == () and dump.scenarios == ("s",)


def test_rows_dump_mask_spans_give_the_same_mask_as_token_mask():
    dump = parse_rows_dump(text(row(token_mask=..., mask_spans=[[1, 2], [3, 4]])))
    assert dump.rows[0].token_mask.tolist() == [0.0, 1.0, 0.0, 1.0]


def test_rows_dump_reads_optional_fields_and_padding_rows():
    full = row(trace_index=1, rollout_advantage=0.75, sample_mask=1, generation_policy_version=3,
               media_ids=["m1"], pixel_digests=[DIGEST], routed_experts_sentinel_positions=[3])
    pad = row(physical_trace_id=None, logical_rollout_id=None, parent_index=-1, input_ids=[], token_mask=[],
              generation_logprobs=[], advantages=[])
    dump = parse_rows_dump(text(full, "", pad))
    a, b = dump.rows
    assert (a.trace_index, a.rollout_advantage, a.sample_mask, a.generation_policy_version) == (1, 0.75, 1.0, 3)
    assert (a.media_ids, a.pixel_digests, a.sentinel_positions) == (("m1",), (DIGEST,), (3,))
    assert (b.line, b.is_padding, b.length) == (3, True, 0)


def test_rows_dump_error_line_is_read():
    dump = parse_rows_dump(text({"scenario": "s", "step": 1, "error": {"code": "incomplete_group", "rollout_id": "r0",
                                                                       "turn_id": None}}))
    (e,) = dump.errors
    assert (e.line, e.scenario, e.step, e.code, e.rollout_id, e.turn_id) == (1, "s", 1, "incomplete_group", "r0", None)
    assert dump.error_of("s") is e and dump.error_of("t") is None


def test_rows_dump_invalid_json_names_the_line():
    err = problem(row(), '{"scenario": "s", ')
    assert (err.line, err.column, err.field, err.code) == (2, 19, "$", "invalid_argument")
    assert str(err) == ("invalid_argument: dump.jsonl:2:19: field $: not valid JSON: Expecting property name enclosed "
                        "in double quotes")


def test_rows_dump_line_that_is_not_an_object_is_refused():
    err = problem("[1, 2]")
    assert (err.line, err.field, err.problem) == (1, "<line>", "expected a JSON object, got list")


def test_rows_dump_missing_field_is_named():
    err = problem(row(), row(advantages=...))
    assert (err.line, err.field, err.problem) == (2, "advantages", "is required but missing")


def test_rows_dump_wrong_type_names_the_element():
    err = problem(row(input_ids=[5, 6, "x", 8]))
    assert (err.line, err.field) == (1, "input_ids[2]")
    assert "'x' is not of type 'integer'" in err.problem


def test_rows_dump_unknown_field_is_named():
    err = problem(row(token_maks=[0, 0, 1, 1]))
    assert (err.field, err.problem) == ("token_maks", "is not a field of the rows dump (misspelt?)")


def test_rows_dump_needs_exactly_one_mask_encoding():
    assert problem(row(token_mask=...)).field == "token_mask"
    both = problem(row(mask_spans=[[2, 4]]))
    assert (both.field, both.problem) == ("token_mask", "give token_mask or mask_spans, not both")


def test_rows_dump_real_row_needs_its_ids():
    err = problem(row(physical_trace_id=...))
    assert (err.field, err.problem) == ("physical_trace_id", "is required but missing")


def test_rows_dump_per_token_lists_must_match_input_ids():
    err = problem(row(advantages=[0.0, 0.75, 0.75]))
    assert (err.field, err.problem) == ("advantages", "has 3 entries; input_ids has 4 (one per token)")


@pytest.mark.parametrize(("spans", "field", "what"), [
    ([[2, 5]], "mask_spans[0]", "[2, 5) is not a non-empty span inside the row's 4 tokens"),
    ([[2, 2]], "mask_spans[0]", "[2, 2) is not a non-empty span inside the row's 4 tokens"),
    ([[1, 3], [2, 4]], "mask_spans[1]", "[2, 4) overlaps or precedes the previous span (ending at 3)"),
])
def test_rows_dump_mask_spans_must_lie_inside_the_row_in_order(spans, field, what):
    err = problem(row(token_mask=..., mask_spans=spans))
    assert (err.field, err.problem) == (field, what)


def test_rows_dump_pixel_digests_pair_with_media_ids():
    err = problem(row(media_ids=["m1", "m2"], pixel_digests=[DIGEST]))
    assert (err.field, err.problem) == ("pixel_digests", "has 1 digests for 2 media_ids (one per image)")
    assert problem(row(pixel_digests=["not-hex"])).field == "pixel_digests[0]"


def test_rows_dump_sentinel_position_must_be_inside_the_row():
    err = problem(row(routed_experts_sentinel_positions=[1, 4]))
    assert (err.field, err.problem) == ("routed_experts_sentinel_positions[1]", "position 4 is past the row's 4 tokens")


def test_rows_dump_second_error_line_for_a_scenario_is_refused():
    refusal = {"scenario": "s", "step": 0, "error": {"code": "incomplete_group"}}
    err = problem(refusal, refusal)
    assert (err.line, err.field) == (2, "error")
    assert "already has an error line (line 1)" in err.problem


def test_rows_dump_rows_after_a_refused_step_are_refused():
    refusal = {"scenario": "s", "step": 1, "error": {"code": "incomplete_group"}}
    err = problem(row(step=0), row(step=1), refusal)
    assert (err.line, err.field) == (2, "step")
    assert err.problem == "scenario 's' refused step 1 (line 3); it has no rows at step 1"


def test_read_rows_dump_refuses_non_utf8_and_missing_files(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\xff\xfe{}\n")
    with pytest.raises(RowsDumpError) as info:
        read_rows_dump(bad)
    assert (info.value.line, info.value.column, info.value.field) == (1, 1, None)
    assert info.value.problem == ("not UTF-8 text: invalid start byte (byte 0xff at offset 0); is this a binary file?")
    with pytest.raises(ConfigError, match="file not found"):
        read_rows_dump(tmp_path / "absent.jsonl")


def test_rows_dump_error_json_names_file_line_and_field():
    err = problem(row(advantages=...))
    assert err.to_json() == {"error_code": "invalid_argument", "file": "dump.jsonl", "line": 1, "column": None,
                             "field": "advantages", "message": "is required but missing"}


def test_metrics_dump_parses_values_and_non_finite_strings():
    dump = parse_metrics_dump(text({"scenario": "s", "step": 0, "metrics": {"loss": 0.5, "n": 3, "x": "nan",
                                                                            "y": "-inf"}}))
    got = dump.get("s", 0)
    assert (got["loss"], got["n"], got["y"]) == (0.5, 3.0, -math.inf) and math.isnan(got["x"])
    assert dump.get("s", 1) == {} and dump.lines == {("s", 0): 1}


def test_metrics_dump_refuses_a_repeated_step_and_bad_values():
    line = {"scenario": "s", "step": 0, "metrics": {"loss": 0.5}}
    with pytest.raises(RowsDumpError) as info:
        parse_metrics_dump(text(line, line), source="m.jsonl")
    assert (info.value.line, info.value.field) == (2, "step")
    with pytest.raises(RowsDumpError) as info:
        parse_metrics_dump(text({"scenario": "s", "step": 0, "metrics": {"loss": "big"}}), source="m.jsonl")
    assert (info.value.line, info.value.field) == (1, "metrics.loss")


def test_metrics_line_keeps_numbers_and_spells_non_finite_values():
    assert metrics_line("s", 2, {"b": 1, "a": 0.5, "c": float("inf"), "flag": True, "name": "x"}) == {
        "scenario": "s", "step": 2, "metrics": {"a": 0.5, "b": 1, "c": "inf"}}


def test_format_dump_writes_one_compact_line_per_object():
    assert format_dump([{"a": 1}, {"b": [1, 2]}]) == '{"a":1}\n{"b":[1,2]}\n'
