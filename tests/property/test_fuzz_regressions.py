"""Replay every fuzz-found bug (tests/fixtures/fuzz_regressions/*.json) with its exact typed answer.

A fixture holds the shrunk payload, what went wrong before (`bug`), and the expected refusal:
`{"code", "turn", "stage": "plan" | "materialize"}`. `nest` (optional) injects a value nested
`depth` levels deep at `path`, which JSON files cannot hold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from compactsim.harness.core.errors import ContractError
from compactsim.harness.pipeline.materializer import materialize
from compactsim.harness.pipeline.planner import plan_rollout
from tests.property.fuzz_evidence import FUZZ_CONFIG, run_case

FIXTURES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "fuzz_regressions").glob("*.json"))


def _load(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    doc = json.loads(path.read_text())
    payload = doc["payload"]
    nest = doc.get("nest")
    if nest is not None:
        deep: Any = 0
        for _ in range(nest["depth"]):
            deep = [deep]
        target = payload
        for key in nest["path"][:-1]:
            target = target[key]
        target[nest["path"][-1]] = deep
    return doc, payload


def test_there_is_a_fixture_per_reported_bug_class():
    assert len(FIXTURES) >= 12


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_fuzz_regression_gets_its_typed_answer(path):
    doc, payload = _load(path)
    want = doc["expect"]
    plan = plan_rollout(payload, strict=False)  # never raises
    if want["stage"] == "plan":
        assert [(v.code, v.turn_id) for v in plan.violations[:1]] == [(want["code"], want["turn"])]
        with pytest.raises(ContractError) as info:
            plan_rollout(payload)
    else:
        assert plan.trainable, plan.violations
        with pytest.raises(ContractError) as info:
            materialize([plan], FUZZ_CONFIG)
    assert (info.value.code, info.value.turn_id) == (want["code"], want["turn"])
    assert not run_case(payload).untyped
