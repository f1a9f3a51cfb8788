"""verify checks what it claims: parent_index in the goldens' trainer order, omitted fields never self-compared, --strict."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from compactsim.harness.core.expectations import ExpectedError
from tests.unit.golden.golden_builders import dump_lines, expectation, golden, golden_scenario, refused_expectation
from tests.unit.golden.test_verify import findings, line, verify

OPTIONAL = ("trace_index", "rollout_advantage", "generation_policy_version", "media_ids",
            "pixel_digests", "routed_experts_sentinel_positions")


def _without(lines: list[dict[str, Any]], *fields: str) -> list[dict[str, Any]]:
    return [{k: v for k, v in ln.items() if k not in fields} for ln in lines]


def test_swapped_parent_indices_are_row_owner_findings_even_with_consistent_labels():
    lines = dump_lines()
    for ln in lines:  # r0's rows claim slot 1 and r1's slot 0: self-consistent, but not the trainer order
        if ln["parent_index"] >= 0:
            ln["parent_index"] = 1 - ln["parent_index"]
    assert findings(lines) == [
        ("row.owner", 0, "r0/trace-0", None, "r0", "r1"),
        ("row.owner", 0, "r0/trace-1", None, "r0", "r1"),
        ("row.owner", 0, "r1/trace-0", None, "r1", "r0"),
    ]


def test_out_of_range_parent_indices_are_row_owner_findings():
    lines = dump_lines()
    line(lines, "r0/trace-0")["parent_index"] = 5
    line(lines, "r0/trace-1")["parent_index"] = 5
    line(lines, "r1/trace-0")["parent_index"] = 6
    assert findings(lines) == [
        ("row.owner", 0, "r0/trace-0", None, "r0", None),
        ("row.owner", 0, "r0/trace-1", None, "r0", None),
        ("row.owner", 0, "r1/trace-0", None, "r1", None),
    ]


def test_omitted_field_is_not_checked_and_the_audit_never_sees_the_expected_value(monkeypatch):
    import compactsim.harness.golden.verify as V

    seen: list[Any] = []
    real = V.audit_run

    def spy(expectation: Any, observed: Any, **kw: Any) -> Any:
        seen.append(observed)
        return real(expectation, observed, **kw)

    monkeypatch.setattr(V, "audit_run", spy)
    report = verify(_without(dump_lines(), *OPTIONAL))
    assert report.passed
    (observed,) = seen
    real_rows = [r for r in observed.steps[0].rows if not r.is_padding]
    assert [(r.trace_index, r.media_ids, r.pixel_digests, r.declared_sentinel_positions, r.generation_policy_version)
            for r in real_rows] == [(-1, (), (), (), -1)] * 3
    assert all(lg.advantage != lg.advantage for lg in observed.steps[0].logical)


def test_an_absent_sample_mask_is_read_as_one_so_an_ignored_mask_sample_is_caught():
    lines = _without(dump_lines(), "sample_mask")
    assert verify(lines).passed and "sample_mask" not in verify(lines).scenarios[0].not_checked
    masked = dump_lines()
    line(masked, "r1/trace-0")["sample_mask"] = 0.0
    exp = expectation()
    (step,) = exp.steps
    rows = tuple(replace(r, sample_mask=0.0) if r.logical_rollout_id == "r1" else r for r in step.rows)
    g = golden(golden_scenario(replace(exp, steps=(replace(step, rows=rows),))))
    assert verify(masked, g=g).passed
    assert findings(_without(masked, "sample_mask"), g=g) == [("row.sample_mask", 0, "r1/trace-0", None, 0.0, 1.0)]


def test_a_stated_null_policy_version_is_compared_an_absent_one_is_not_checked():
    stated = dump_lines()
    line(stated, "r0/trace-1")["generation_policy_version"] = None
    (f,) = verify(stated).findings
    assert (f.check, f.row, f.expected, f.actual) == ("row.policy_version", "r0/trace-1", 0, None)
    assert "unknown (null)" in f.message
    absent = dump_lines()
    del line(absent, "r0/trace-1")["generation_policy_version"]
    report = verify(absent)
    assert report.passed and dict(report.scenarios[0].not_checked) == {"generation_policy_version": 1}


def test_a_zero_based_refusal_turn_is_a_location_finding_not_a_malformed_dump():
    exp = refused_expectation()
    err = ExpectedError("incomplete_group", "r0", 1)
    exp = replace(exp, error=err, steps=(replace(exp.steps[0], error=err, batch_error=err),))
    line_ = {"scenario": exp.scenario, "step": 0, "error": {"code": "incomplete_group", "rollout_id": "r0", "turn_id": 0}}
    checks = [f.check for f in verify([line_], g=golden(golden_scenario(exp))).findings]
    assert checks == ["verdict.error_location"]


def test_omitted_media_does_not_hide_a_wrong_token():
    lines = _without(dump_lines(), "media_ids", "pixel_digests")
    line(lines, "r0/trace-1")["input_ids"][3] = 99
    assert findings(lines) == [("row.tokens", 0, "r0/trace-1", 3, 4, 99)]


def test_strict_turns_every_not_checked_field_into_a_finding():
    lines = _without(dump_lines(), "media_ids", "rollout_advantage")
    assert verify(lines).passed
    report = verify(lines, strict=True)
    assert [(f.check, f.step, f.row, f.expected, f.actual) for f in report.findings] == [
        ("row.media", 0, "r0/trace-0", ("m1",), None),
        ("row.media", 0, "r0/trace-1", ("m1", "m2"), None),
        ("row.media", 0, "r1/trace-0", (), None),
        ("rollout.advantage", 0, None, -0.75, None),
        ("rollout.advantage", 0, None, 0.75, None),
    ]
    assert report.findings[0].message == ("media_ids is absent from the dump for the row; --strict requires every "
                                          "optional field")


def test_strict_passes_a_complete_dump():
    assert verify(dump_lines(), strict=True).findings == ()
