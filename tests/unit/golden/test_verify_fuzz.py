"""Any rows dump, however mangled, ends in a verdict or one typed `RowsDumpError`: never another exception.

Mutations start from a correct dump of the toy goldens (with routes) and replace, drop or add one
field of one line with an arbitrary JSON value, duplicate or drop a line, so each case is near
enough to valid to reach the audit.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactsim.harness.golden.rows_dump import RowsDumpError, parse_rows_dump
from compactsim.harness.golden.verify import verify_dump
from tests.unit.golden.golden_builders import dump_lines, golden, golden_scenario
from tests.unit.golden.test_verify_routes import routed

SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
           | st.sampled_from(["nan", "inf", "-inf", "", "r0/trace-0", "r0", "toy"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=5), max_leaves=40)
BASE = dump_lines(routed())
FIELDS = sorted({k for line in BASE for k in line} | {"token_mask", "mask_spans", "error", "extra"})
GOLDEN = golden(golden_scenario(routed()))


@st.composite
def mangled(draw: st.DrawFn) -> list[dict[str, Any]]:
    lines = json.loads(json.dumps(BASE))
    k = draw(st.integers(0, len(lines) - 1))
    action = draw(st.sampled_from(["set", "drop", "set-item", "dup", "remove"]))
    if action == "dup":
        lines.append(json.loads(json.dumps(lines[k])))
    elif action == "remove":
        del lines[k]
    else:
        field = draw(st.sampled_from(FIELDS))
        if action == "drop":
            lines[k].pop(field, None)
        elif action == "set-item" and isinstance(lines[k].get(field), list) and lines[k][field]:
            i = draw(st.integers(0, len(lines[k][field]) - 1))
            lines[k][field][i] = draw(VALUES)
        else:
            lines[k][field] = draw(VALUES)
    return lines


@pytest.mark.slow  # ~8 s: `make test` runs it, `make test-fast` does not
@settings(max_examples=400, deadline=None)
@given(lines=mangled())
def test_a_mangled_dump_gets_a_verdict_or_a_typed_error(lines: list[dict[str, Any]]):
    try:
        # written as any trainer's own writer might, Python's NaN/Infinity spellings included (format_dump refuses them)
        text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
        report = verify_dump(GOLDEN, parse_rows_dump(text, source="rows.jsonl"))
    except RowsDumpError as exc:  # malformed, or a line for a scenario the goldens lack
        assert exc.source == "rows.jsonl" and exc.problem
        return
    assert isinstance(report.passed, bool)
    json.dumps(report.to_json())  # the --json output is plain JSON
