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


ROUTES = [[[0, 2], [1, 3]], [[1, 0], [2, 3]], [[3, 2], [0, 1]], [[-1, -1], [-1, -1]]]


def test_rows_dump_reads_routes_as_a_tokens_layers_topk_array():
    r = parse_rows_dump(text(row(routed_experts=ROUTES))).rows[0]
    assert r.routes is not None and r.routes.dtype.name == "int64" and r.routes.shape == (4, 2, 2)
    assert r.routes.tolist() == ROUTES
    assert parse_rows_dump(text(row(routed_experts=None))).rows[0].routes is None
    pad = row(physical_trace_id=None, logical_rollout_id=None, parent_index=-1, input_ids=[], token_mask=[],
              generation_logprobs=[], advantages=[], routed_experts=[])
    assert parse_rows_dump(text(pad)).rows[0].routes.shape == (0, 0, 0)


def _routes_with(token: int, value: Any) -> list[Any]:
    routes = json.loads(json.dumps(ROUTES))
    routes[token] = value
    return routes


@pytest.mark.parametrize(("routes", "field", "fragment"), [
    (ROUTES[:3], "routed_experts", "has 3 entries; input_ids has 4 (one per token)"),
    (_routes_with(2, [[3, 2]]), "routed_experts[2]", "has [layers, topk] [1, 2]; position 0 has [2, 2]"),
    (_routes_with(1, [[1, 0], [2]]), "routed_experts[1]", "layers have different top-k lengths"),
    (_routes_with(3, [[-1, True], [-1, -1]]), "routed_experts[3][0][1]", "True is not of type 'integer'"),
    (_routes_with(0, [[0, 2.5], [1, 3]]), "routed_experts[0][0][1]", "2.5 is not of type 'integer'"),
    (_routes_with(0, [[0, -2], [1, 3]]), "routed_experts[0][0][1]", "-2 is less than the minimum of -1"),
    (_routes_with(0, [[0, 2**31], [1, 3]]), "routed_experts[0][0][1]", "is greater than the maximum"),
    (_routes_with(0, [[], [1, 3]]), "routed_experts[0][0]", "should be non-empty"),
    (_routes_with(0, 5), "routed_experts[0]", "is not of type 'array'"),
    ("nrlre1:int16:4x2x2:AAAA", "routed_experts", "is not of type 'array', 'null'"),
])
def test_rows_dump_routes_must_be_one_layers_by_topk_id_array_per_token(routes: Any, field: str, fragment: str):
    err = problem(row(routed_experts=routes))
    assert err.field == field and fragment in err.problem, (err.field, err.problem)


def test_rows_dump_routes_accept_integral_floats_like_the_other_integer_fields():
    routes = [[[float(x) for x in layer] for layer in token] for token in ROUTES]
    assert parse_rows_dump(text(row(routed_experts=routes))).rows[0].routes.tolist() == ROUTES


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
    with pytest.raises(RowsDumpError) as info:  # named as the metrics dump, not the rows dump (CLI probe)
        parse_metrics_dump(text({"scenario": "s", "step": 0, "metrics": {}, "zzz": 1}), source="m.jsonl")
    assert (info.value.field, info.value.problem) == ("zzz", "is not a field of the metrics dump (misspelt?)")


def test_metrics_line_keeps_numbers_and_spells_non_finite_values():
    assert metrics_line("s", 2, {"b": 1, "a": 0.5, "c": float("inf"), "flag": True, "name": "x"}) == {
        "scenario": "s", "step": 2, "metrics": {"a": 0.5, "b": 1, "c": "inf"}}


def test_format_dump_writes_one_compact_line_per_object():
    assert format_dump([{"a": 1}, {"b": [1, 2]}]) == '{"a":1}\n{"b":[1,2]}\n'


# ------------------------------------------------------------------------------ strict integers (red team)

@pytest.mark.parametrize(("line", "field", "problem_text"), [
    ('"input_ids": [99999999999999999999, 6, 7, 8]', "input_ids[0]",
     "expected an integer in [0, 2147483648), got 99999999999999999999"),
    ('"input_ids": [5, 1e300, 7, 8]', "input_ids[1]",
     "expected an integer in [0, 2147483648), got 1e+300"),
    ('"input_ids": [5, 6, 7.5, 8]', "input_ids[2]", "7.5 is not of type 'integer'"),
    ('"input_ids": [5, 6, 7, 2147483648]', "input_ids[3]", "expected an integer in [0, 2147483648), got 2147483648"),
    ('"token_mask": [0, 0, 0.5, 1]', "token_mask[2]", "0.5 is not one of [0, 1]"),
    ('"token_mask": [0, 0, true, 1]', "token_mask[2]", "True is not one of [0, 1]"),
    ('"step": 99999999999999999999', "step", "expected an integer in [0, 2147483648), got 99999999999999999999"),
    ('"step": 0.5', "step", "0.5 is not of type 'integer'"),
    ('"parent_index": 1e300', "parent_index", "expected an integer in [-1, 2147483648), got 1e+300"),
    ('"trace_index": 99999999999999999999', "trace_index",
     "expected an integer in [-1, 2147483648), got 99999999999999999999"),
    ('"generation_policy_version": -5', "generation_policy_version", "expected an integer in [0, 2147483648), got -5"),
    ('"generation_policy_version": 2.5', "generation_policy_version",
     "2.5 is not of type 'integer', 'null'"),
    ('"routed_experts_sentinel_positions": [3.5]', "routed_experts_sentinel_positions[0]",
     "3.5 is not of type 'integer'"),
    ('"routed_experts_sentinel_positions": [99999999999999999999]', "routed_experts_sentinel_positions[0]",
     "expected an integer in [0, 2147483648), got 99999999999999999999"),
])
def test_rows_dump_integer_fields_are_strict_ints_within_int32(line, field, problem_text):
    # 20-digit ids overflowed int64 (OverflowError) and 1e300 passed JSON Schema's "integer";
    # fractions are the schema's to refuse, integral floats (2.0) read as integers
    obj = row()
    key = line.split(":", 1)[0].strip('"')
    obj.pop(key, None)
    raw = json.dumps(obj)[:-1] + ", " + line + "}"
    err = problem(raw)
    assert (err.line, err.field, err.problem) == (1, field, problem_text)


@pytest.mark.parametrize(("spans", "field", "problem_text"), [
    ([[0.5, 2]], "mask_spans[0][0]", "0.5 is not of type 'integer'"),
    ([[1, 2], [3, 1e300]], "mask_spans[1][1]", "expected an integer in [0, 2147483648), got 1e+300"),
    ([[0, 99999999999999999999]], "mask_spans[0][1]",
     "expected an integer in [0, 2147483648), got 99999999999999999999"),
])
def test_rows_dump_mask_spans_are_strict_ints(spans, field, problem_text):
    # [[0.5, 2]] used to end in "TypeError: slice indices must be integers"
    err = problem(json.dumps(row(token_mask=...))[:-1] + ', "mask_spans": ' + json.dumps(spans) + "}")
    assert (err.line, err.field, err.problem) == (1, field, problem_text)


def test_rows_dump_error_line_turn_and_step_are_strict_ints():
    refusal = {"scenario": "s", "step": 0, "error": {"code": "incomplete_group", "turn_id": -3}}
    err = problem(refusal)
    assert (err.field, err.problem) == ("error.turn_id", "expected an integer in [0, 2147483648), got -3")
    zero = {"scenario": "s", "step": 0, "error": {"code": "incomplete_group", "turn_id": 0}}
    assert parse_rows_dump(text(zero)).errors[0].turn_id == 0  # read, then compared (a 0-based trainer's turn)
    err = problem({"scenario": "s", "step": 1.5, "error": {"code": "incomplete_group"}})
    assert (err.field, err.problem) == ("step", "1.5 is not of type 'integer'")


def test_metrics_dump_step_is_a_strict_int():
    with pytest.raises(RowsDumpError) as info:
        parse_metrics_dump('{"scenario": "s", "step": 2.5, "metrics": {"loss": 0.5}}\n', source="m.jsonl")
    assert (info.value.line, info.value.field) == (1, "step")


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085"])
def test_rows_dump_keeps_unicode_line_separators_inside_strings(char, tmp_path: Path):
    # str.splitlines() broke the line inside the message: "Unterminated string"
    refusal = {"scenario": "s", "step": 0, "error": {"code": "incomplete_group", "message": "a" + char + "b"}}
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row(), ensure_ascii=False) + "\r\n" + json.dumps({**refusal, "scenario": "t"},
                                                                                 ensure_ascii=False) + "\n",
                    encoding="utf-8")
    dump = read_rows_dump(path)
    assert len(dump.rows) == 1
    (e,) = dump.errors
    assert (e.line, e.message) == (2, "a" + char + "b")
    metrics = parse_metrics_dump(json.dumps({"scenario": "s" + char, "step": 0, "metrics": {"x": 1}},
                                            ensure_ascii=False) + "\n")
    assert metrics.get("s" + char, 0) == {"x": 1.0}


def test_integral_floats_read_as_the_integers_json_schema_says_they_are():
    """A trainer dumping `mask.float().tolist()` writes 1.0: the schema's "integer" admits it, and so does the parser."""
    as_ints = row()
    as_floats = {**as_ints, "step": float(as_ints["step"]), "input_ids": [float(i) for i in as_ints["input_ids"]],
                 "parent_index": float(as_ints["parent_index"])}
    a = parse_rows_dump(json.dumps(as_ints) + "\n", source="a.jsonl").rows[0]
    b = parse_rows_dump(json.dumps(as_floats) + "\n", source="b.jsonl").rows[0]
    assert (b.step, b.parent_index, b.input_ids.tolist()) == (a.step, a.parent_index, a.input_ids.tolist())
    assert type(b.step) is int and b.input_ids.dtype == a.input_ids.dtype


def test_format_dump_writes_a_metrics_lines_non_finite_values_as_the_reader_reads_them():
    text = format_dump([{"scenario": "s", "step": 0, "metrics": {"a": math.nan, "b": -math.inf, "c": 1.5}}])
    assert text == '{"scenario":"s","step":0,"metrics":{"a":"nan","b":"-inf","c":1.5}}\n'
    values = parse_metrics_dump(text).get("s", 0)
    assert math.isnan(values["a"]) and values["b"] == -math.inf and values["c"] == 1.5


def test_format_dump_refuses_a_non_finite_number_outside_metrics_naming_line_and_field():
    with pytest.raises(RowsDumpError) as info:
        format_dump([{"a": 1}, {"rows": [{"logprobs": [0.0, math.inf]}]}])
    assert (info.value.line, info.value.field) == (2, "rows[0].logprobs[1]")
    assert "not a finite number" in str(info.value)
