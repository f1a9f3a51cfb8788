"""`verify` compares a dump's replayed routes with the goldens' when both have them (golden spec §11, §15)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from compactsim.harness.core.expectations import ScenarioExpectation
from compactsim.harness.golden.rows_dump import format_dump, parse_rows_dump
from compactsim.harness.golden.verify import verify_dump
from tests.unit.golden.golden_builders import dump_lines, expectation, golden, golden_scenario

#: One MoE layer, top-2. r0/trace-0 ends at a boundary (sentinel at 4); r0/trace-1's position 2
#: is turn 2's final token, repaired from turn 3's prefill; r1/trace-0 is one call, final
#: placeholder [0, 1] on its last token.
ROUTES = {
    "r0/trace-0": [[[2, 3]], [[1, 0]], [[3, 1]], [[0, 2]], [[-1, -1]]],
    "r0/trace-1": [[[2, 3]], [[1, 2]], [[3, 0]], [[1, 3]], [[2, 1]], [[0, 1]]],
    "r1/trace-0": [[[1, 3]], [[2, 0]], [[3, 2]], [[0, 1]]],
}


def routed() -> ScenarioExpectation:
    exp = expectation()
    (step,) = exp.steps
    rows = tuple(replace(r, routes=np.asarray(ROUTES[r.physical_trace_id], dtype=np.int64)) for r in step.rows)
    return replace(exp, steps=(replace(step, rows=rows),))


def verify(lines: list[dict[str, Any]], exp: ScenarioExpectation | None = None, **kw: Any):
    dump = parse_rows_dump(format_dump(lines), source="rows.jsonl")
    return verify_dump(golden(golden_scenario(exp or routed())), dump, **kw)


def findings(lines: list[dict[str, Any]], **kw: Any) -> list[tuple[Any, ...]]:
    return [(f.check, f.row, f.position, f.expected, f.actual) for f in verify(lines, **kw).findings]


def lines_with_routes() -> list[dict[str, Any]]:
    return dump_lines(routed())


def line(lines: list[dict[str, Any]], trace_id: str) -> dict[str, Any]:
    return next(ln for ln in lines if ln["physical_trace_id"] == trace_id)


def test_the_goldens_routes_pass_and_are_compared_token_by_token():
    lines = lines_with_routes()
    assert line(lines, "r0/trace-1")["routed_experts"] == ROUTES["r0/trace-1"]
    report = verify(lines, strict=True)
    assert report.passed and dict(report.scenarios[0].not_checked) == {}


def test_an_unrepaired_placeholder_is_a_route_finding_at_the_call_s_final_token():
    lines = lines_with_routes()
    line(lines, "r0/trace-1")["routed_experts"][2] = [[0, 1]]  # the decode placeholder kept
    (f,) = verify(lines).findings
    assert (f.check, f.row, f.position, f.expected, f.actual) == ("row.route", "r0/trace-1", 2, [[3, 0]], [[0, 1]])
    assert "final token" in f.message and "next call's prefill" in f.message


def test_routes_shifted_by_one_token_are_one_finding_per_row_naming_the_first_position():
    lines = lines_with_routes()
    routes = line(lines, "r1/trace-0")["routed_experts"]
    line(lines, "r1/trace-0")["routed_experts"] = routes[1:] + routes[-1:]
    assert findings(lines) == [("row.route", "r1/trace-0", 0, [[1, 3]], [[2, 0]])]


def test_a_placeholder_at_a_boundary_is_a_sentinel_finding_even_if_declared():
    lines = lines_with_routes()
    line(lines, "r0/trace-0")["routed_experts"][4] = [[0, 1]]  # declared [4] still: the routes are what trains
    assert findings(lines) == [("row.sentinel", "r0/trace-0", 4, -1, [[0, 1]])]


def test_a_sentinel_at_a_repaired_position_is_a_sentinel_finding():
    lines = lines_with_routes()
    line(lines, "r0/trace-1")["routed_experts"][2] = [[-1, -1]]
    assert findings(lines) == [("row.sentinel", "r0/trace-1", 2, "repaired route", -1)]


def test_a_different_layout_is_one_route_finding():
    lines = lines_with_routes()
    line(lines, "r1/trace-0")["routed_experts"] = [[[1, 3, 0]]] * 4
    assert findings(lines) == [("row.route", "r1/trace-0", None, [1, 2], [1, 3])]


def test_omitted_routes_are_not_checked_and_the_declared_sentinels_still_are():
    lines = [{k: v for k, v in ln.items() if k != "routed_experts"} for ln in lines_with_routes()]
    report = verify(lines)
    assert report.passed and dict(report.scenarios[0].not_checked) == {"routed_experts": 3}
    line(lines, "r0/trace-0")["routed_experts_sentinel_positions"] = []
    assert findings(lines) == [("row.sentinel", "r0/trace-0", 4, -1, None)]


def test_omitted_routes_are_findings_under_strict():
    lines = lines_with_routes()
    del line(lines, "r0/trace-1")["routed_experts"]
    assert findings(lines, strict=True) == [("row.route", "r0/trace-1", None, [6, 1, 2], None)]


def test_goldens_without_routes_check_a_dump_s_routes_for_sentinels_only():
    lines = lines_with_routes()  # e.g. goldens exported before routes were written
    assert verify(lines, exp=expectation(), strict=True).passed
    line(lines, "r0/trace-0")["routed_experts"][4] = [[0, 1]]
    assert [f.check for f in verify(lines, exp=expectation()).findings] == ["row.sentinel"]


def test_routes_without_the_sentinel_field_still_have_their_sentinels_checked():
    """Omitting `routed_experts_sentinel_positions` used to mark the row's `row.sentinel` check "not checked", which
    also dropped the finding the routes themselves gave: a boundary without its sentinel verified clean."""
    lines = lines_with_routes()
    for ln in lines:
        ln.pop("routed_experts_sentinel_positions", None)
    assert verify(lines, strict=True).passed  # routes carry the sentinels: the field is not demanded
    line(lines, "r0/trace-0")["routed_experts"][4] = [[2, 0]]
    report = verify(lines)
    assert [(f.check, f.row, f.position, f.expected, f.actual) for f in report.findings] == [
        ("row.sentinel", "r0/trace-0", 4, -1, [[2, 0]])]
    assert "routed_experts_sentinel_positions" not in dict(report.scenarios[0].not_checked)


def test_a_stated_sentinel_must_be_what_the_row_s_own_routes_say():
    lines = lines_with_routes()
    line(lines, "r1/trace-0")["routed_experts_sentinel_positions"] = [1]
    assert findings(lines) == [("row.sentinel", "r1/trace-0", 1, -1, [[2, 0]])]
