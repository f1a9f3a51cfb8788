"""verify checks what it claims: parent_index in the goldens' trainer order, omitted fields never self-compared, --strict."""

from __future__ import annotations

from typing import Any

from tests.unit.golden.golden_builders import dump_lines
from tests.unit.golden.test_verify import findings, line, verify

OPTIONAL = ("trace_index", "rollout_advantage", "sample_mask", "generation_policy_version", "media_ids",
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
    assert all(r.sample_mask != r.sample_mask for r in real_rows)  # NaN: never equal to the expected 1.0
    assert all(lg.advantage != lg.advantage for lg in observed.steps[0].logical)


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
