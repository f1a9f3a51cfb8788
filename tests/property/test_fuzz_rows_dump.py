"""Mutated rows and metrics dumps get a verdict or one typed error from `compactsim verify`, never a traceback.

The dumps come from another project's trainer, so every shape can arrive. Each example starts from
the reference pipeline's own dumps of one exported scenario (which verify with exit 0) and applies
one to three mutations: a field's value replaced by a value of another JSON type or an edge number
(NaN, a huge int, -0.0), a number written in another form (3 as 3.0) or moved by one, a list entry changed, removed or added, a field removed or added, a line
duplicated, dropped or replaced by text that is not JSON. The command must then exit 0 (the
mutation did not matter: an off-mask position, an omitted optional field), 1 (findings) or 2 with one
``error:`` line naming the dump; with ``--json`` the output is one JSON document whatever the exit.
An ad-hoc run of 2,000 such dumps before this test found no untyped failure.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from compactsim.harness.cli import app
from tests.property.json_paths import at, paths

pytestmark = [pytest.mark.timeout(600), pytest.mark.filterwarnings("ignore::DeprecationWarning")]

NAME = "image-compaction-k2-rolling"

_edge = st.sampled_from([None, True, False, 0, -1, 1, 2**31, 2**63, -(2**70), 10**40, 0.5, -0.0, 0.0, 3.0, 1e308, math.nan,
                         math.inf, "", "x", "NaN", "s0-g0-r0/trace-1", NAME, [], {}, [[]], [None], [[-1, -1]]])
_scalars = st.one_of(_edge, st.integers(-(2**40), 2**40), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6))
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
                       max_leaves=5)
_KEYS = ["scenario", "step", "error", "metrics", "parent_index", "input_ids", "token_mask", "mask_spans", "advantages",
         "generation_logprobs", "sample_mask", "routed_experts", "media_ids", "trace_index", "rollout_advantage"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], list[dict[str, Any]]]:
    """(golden dir, reference rows, reference metrics) of a one-scenario, one-step export."""
    base = tmp_path_factory.mktemp("fuzz-dump")
    result = CliRunner().invoke(app, ["export", NAME, "--seed", "0", "--steps", "1", "--out", str(base / "g"),
                                      "--reference-dump", str(base / "ref")])
    assert result.exit_code == 0, result.output
    read = lambda name: [json.loads(line) for line in (base / "ref" / name).read_text().splitlines()]  # noqa: E731
    return base / "g", read("rows.jsonl"), read("metrics.jsonl")


@st.composite
def mutated_lines(draw: st.DrawFn, lines: list[dict[str, Any]]) -> list[str]:
    """The dump's lines (as text) after one to three mutations (see the module docstring)."""
    objs: list[Any] = json.loads(json.dumps(lines))
    texts: dict[int, str] = {}  # lines replaced by raw text
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(objs) - 1))
        action = draw(st.sampled_from(["value", "value", "number", "remove", "add", "line"]))
        if action == "line":
            kind = draw(st.sampled_from(["duplicate", "drop", "text"]))
            if kind == "duplicate":
                objs.append(json.loads(json.dumps(objs[i])))
            elif kind == "drop" and len(objs) > 1:
                objs.pop(i)
                texts = {}  # the later lines moved up: earlier text replacements would land on other lines
            else:
                texts[i] = draw(st.sampled_from(["{", "[]", "null", '{"scenario": ', "\x00", "{}{}", "1e999"]))
            continue
        where = paths(objs[i], entries=4)[1:]  # long per-token lists: their first entries stand for the rest
        if not where:
            continue
        path = draw(st.sampled_from(where))
        parent, key = at(objs[i], path[:-1]), path[-1]
        if action == "value":
            parent[key] = draw(_values)
        elif action == "number":  # the same number in another form (a float where an int was), or a neighbour
            old = parent[key]
            if isinstance(old, bool) or not isinstance(old, int | float):
                parent[key] = draw(_edge)
            else:
                parent[key] = draw(st.sampled_from([float(old), -float(old), old + 1, old - 1, old * 2**40, float(old) + 0.5]))
        elif action == "remove":
            del parent[key]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(_KEYS))] = draw(_values)
        else:
            parent.append(draw(_values))
    return [texts.get(i, json.dumps(obj)) for i, obj in enumerate(objs)]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@hypothesis_settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), which=st.sampled_from(["rows", "rows", "metrics"]), as_json=st.booleans(), strict=st.booleans())
def test_a_mutated_dump_gets_a_verdict_or_one_typed_error(exported, tmp_path_factory, data, which, as_json, strict):
    golden, rows, metrics = exported
    base = tmp_path_factory.mktemp("dump")
    rows_lines = data.draw(mutated_lines(rows)) if which == "rows" else [json.dumps(r) for r in rows]
    metrics_lines = data.draw(mutated_lines(metrics)) if which == "metrics" else [json.dumps(m) for m in metrics]
    args = ["verify", str(golden), str(_write(base / "rows.jsonl", rows_lines)),
            "--metrics", str(_write(base / "metrics.jsonl", metrics_lines))]
    result = CliRunner().invoke(app, args + (["--json"] if as_json else []) + (["--strict"] if strict else []))
    assert result.exception is None or isinstance(result.exception, SystemExit), (result.exception, rows_lines[:2])
    assert result.exit_code in (0, 1, 2), result.output
    assert "Traceback" not in result.output
    if as_json:
        json.loads(result.output)
    elif result.exit_code == 2:
        assert result.output.startswith("error: ") and f"{which}.jsonl" in result.output, result.output
