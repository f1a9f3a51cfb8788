"""compactsim's agents emit, field for field, what NeMo-Gym 0.7.0's own agent emitted for the same script.

The fixtures are real results of Gym 0.7.0's `SimpleAgentWithCompaction` and
`VLLMModelWithCompaction` on each `live` scenario, recorded by `compactsim gym-check --gym
nemo-gym==0.7.0 --live --out DIR` (``DIR/live-gym/<scenario>.json``). The `gym`-marked live test
re-records and compares on every run; this one keeps the comparison in `make test-fast`, without
the revision's venv. Re-record them when a scenario's script changes.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from compactsim.agents.rollout.gym_response import ReplayMint, add_usage, derived_id, response_usage
from compactsim.harness.gym_check.live import compare_payloads
from compactsim.harness.gym_check.live_gym import compare_with_ours, live_scenarios

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "gym_0_7_0_live"
SCENARIOS = {s.name: s for s in live_scenarios()}


def _recorded(name: str) -> dict[str, Any]:
    return json.loads((RECORDED / f"{name}.json").read_text(encoding="utf-8"))["results"]


def test_every_live_scenario_has_a_recording() -> None:
    assert sorted(p.stem for p in RECORDED.glob("*.json")) == sorted(SCENARIOS)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_our_agents_reproduce_gyms_result_exactly(name: str) -> None:
    report = compare_with_ours(SCENARIOS[name], _recorded(name))
    assert [(r["rollout_id"], r["summary"], r["diffs"]) for r in report["rollouts"]] == [
        (rid, "identical", []) for rid in sorted(_recorded(name))
    ]
    assert report["identical"] is True


def test_a_changed_usage_count_is_named() -> None:
    results = _recorded("live-transient-503")
    results["s0-g0-r0"]["response"]["usage"]["input_tokens"] += 1
    report = compare_with_ours(SCENARIOS["live-transient-503"], results)
    first = report["rollouts"][0]
    assert (first["summary"], [d["path"] for d in first["diffs"]]) == ("1 field(s) differ", ["usage.input_tokens"])
    assert report["rollouts"][1]["summary"] == "identical"
    assert report["identical"] is False


def test_a_different_minted_id_changes_every_digest_built_on_it() -> None:
    """Replaying another reasoning id moves the item, its unit digest and the lineage ids: all are compared."""
    results = _recorded("live-reasoning-stripping")
    real = results["s0-g0-r0"]["response"]
    first_reasoning = next(i for i, it in enumerate(real["output"]) if it["type"] == "reasoning")
    changed = copy.deepcopy(results)
    changed["s0-g0-r0"]["response"]["output"][first_reasoning]["id"] = "rs_" + "0" * 32
    report = compare_with_ours(SCENARIOS["live-reasoning-stripping"], changed)
    paths = [d["path"] for d in report["rollouts"][0]["diffs"]]
    assert f"output[{first_reasoning}].id" not in paths  # ours replays the changed id...
    assert any("source_digest" in p for p in paths)  # ...but Gym's digests were built on the original
    assert any(p.startswith("final_policy_decision.lineage") for p in paths)


def test_strict_comparison_tells_null_from_absent_and_int_from_float() -> None:
    assert compare_payloads({"a": None}, {}) == []
    assert [d.path for d in compare_payloads({"a": None}, {}, strict=True)] == ["a"]
    assert [d.path for d in compare_payloads({"t": 0.0}, {"t": 0}, strict=True)] == ["t"]
    assert [d.path for d in compare_payloads({"t": 1}, {"t": True}, strict=True)] == ["t"]
    assert compare_payloads({"t": [1, {"x": None}]}, {"t": [1, {"x": None}]}, strict=True) == []
    assert compare_payloads({"t": [1, 2]}, {"t": (1, 2)}, strict=True) == []  # both are JSON arrays


def test_replay_mint_hands_out_the_results_ids_in_order_then_derives() -> None:
    response = {"id": "resp_" + "a" * 32, "output": [
        {"type": "reasoning", "id": "rs_1"}, {"type": "function_call", "id": "call_x_1"},
        {"type": "message", "role": "assistant", "id": "msg_1"}, {"type": "reasoning", "id": "rs_2"},
    ]}
    mint = ReplayMint.from_result(response)
    assert [mint("rs", "c", 0), mint("rs", "c", 0), mint("msg", "c", 0), mint("resp", "c", 0)] == \
        ["rs_1", "rs_2", "msg_1", "resp_" + "a" * 32]
    assert mint("rs", "chatcmpl-1", 0) == derived_id("rs", "chatcmpl-1", 0)
    assert derived_id("msg", "chatcmpl-1", 0).startswith("msg_") and len(derived_id("msg", "chatcmpl-1", 0)) == 36


def test_usage_is_gyms_shape_and_adds_up_like_its_agent() -> None:
    one = response_usage({"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13})
    assert one == {"input_tokens": 10, "input_tokens_details": {"cached_tokens": None}, "output_tokens": 3,
                   "output_tokens_details": {"reasoning_tokens": None}, "total_tokens": 13}
    cached = response_usage({"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6,
                             "prompt_tokens_details": {"cached_tokens": 4}})
    total = add_usage(add_usage(None, one), cached)
    assert total == {"input_tokens": 15, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 4,
                     "output_tokens_details": {"reasoning_tokens": None}, "total_tokens": 19}
    assert add_usage(total, None) == total and response_usage(None) is None
