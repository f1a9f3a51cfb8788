"""The reward server returns each rollout's configured reward and mask flag, by index, pattern or predicate."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from compactsim.mock_servers.reward_server import RewardRule, RewardSettings, create_app

pytestmark = pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")


def _response(index: int | None = None, answer: str = "Settings is open.", key: str = "context_compaction_contract"):
    response = {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]}]}
    if index is not None:
        response[key] = {"rollout_id": f"r{index}", "rollout_index": index}
    return response


def _verify(settings: RewardSettings, body: dict) -> dict:
    with TestClient(create_app(settings)) as client:
        resp = client.post("/verify", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_pattern_reward_cycles_by_rollout_index_from_the_contract():
    settings = RewardSettings(rule=RewardRule(kind="pattern", pattern=(1.0, 0.0, 0.5)))
    rewards = [_verify(settings, {"response": _response(i)})["reward"] for i in range(4)]
    assert rewards == [1.0, 0.0, 0.5, 1.0]


def test_by_index_reward_uses_the_default_for_unknown_indices():
    settings = RewardSettings(rule=RewardRule(kind="by_index", rewards={0: 1.0, 2: 0.25}, default=-1.0))
    assert [_verify(settings, {"response": _response(i)})["reward"] for i in range(3)] == [1.0, -1.0, 0.25]


def test_explicit_request_identity_wins_over_the_contract_and_pr2870_key_is_read():
    settings = RewardSettings(rule=RewardRule(kind="by_index", rewards={5: 2.0}))
    assert _verify(settings, {"response": _response(1), "rollout_index": 5})["reward"] == 2.0
    body = _verify(settings, {"response": _response(5, key="rollout_trace_contract")})
    assert (body["reward"], body["rollout_id"], body["rollout_index"]) == (2.0, "r5", 5)


def test_predicate_reward_reads_the_final_assistant_text():
    settings = RewardSettings(rule=RewardRule(kind="predicate", contains="open", reward_true=1.0, reward_false=0.0))
    assert _verify(settings, {"response": _response(0, "Settings is open.")})["reward"] == 1.0
    assert _verify(settings, {"response": _response(0, "I gave up.")})["reward"] == 0.0
    exact = RewardSettings(rule=RewardRule(kind="predicate", equals="42"))
    assert _verify(exact, {"response": _response(0, "42")})["reward"] == 1.0


def test_rollout_id_override_and_mask_sample_flags():
    settings = RewardSettings(by_rollout_id={"r1": 0.75}, mask_sample_indices=frozenset({2}),
                              mask_sample_rollout_ids=frozenset({"r0"}))
    bodies = [_verify(settings, {"response": _response(i)}) for i in range(3)]
    assert [b["reward"] for b in bodies] == [1.0, 0.75, 1.0]
    assert [b["rule"] for b in bodies] == ["fixed", "by_rollout_id", "fixed"]
    assert [b["instance_config"]["mask_sample"] for b in bodies] == [True, False, True]


def _contract(**fields) -> dict:
    return {**_response(), "context_compaction_contract": fields}


@pytest.mark.parametrize(("body", "loc", "msg"), [
    # the contract's identity: a -1 used to pick the pattern's last reward, a "2" was silently no index
    ({"response": _contract(rollout_id="r", rollout_index=-1)},
     ["body", "response", "context_compaction_contract", "rollout_index"], "expected an integer >= 0, found -1"),
    ({"response": _contract(rollout_id="r", rollout_index="2")},
     ["body", "response", "context_compaction_contract", "rollout_index"], "expected an integer >= 0, found '2'"),
    ({"response": _contract(rollout_id="r", rollout_index=True)},
     ["body", "response", "context_compaction_contract", "rollout_index"], "expected an integer >= 0, found True"),
    ({"response": _contract(rollout_id=7)},
     ["body", "response", "context_compaction_contract", "rollout_id"], "expected a string, found 7"),
    ({"response": {**_contract(rollout_id="r", rollout_index=0), "rollout_trace_contract": {"rollout_index": 1}}},
     ["body", "response", "rollout_trace_contract", "rollout_index"],
     "1 disagrees with context_compaction_contract.rollout_index 0"),
    # the explicit fields are strict too: true, "2" and 2.0 used to be the index 1, 2 and 2
    ({"response": _response(), "rollout_index": True}, ["body", "rollout_index"], "Input should be a valid integer"),
    ({"response": _response(), "rollout_index": "2"}, ["body", "rollout_index"], "Input should be a valid integer"),
    ({"response": _response(), "rollout_index": 2.0}, ["body", "rollout_index"], "Input should be a valid integer"),
    ({"response": _response(), "rollout_id": 3}, ["body", "rollout_id"], "Input should be a valid string"),
])
def test_a_rollout_identity_the_reward_cannot_be_chosen_by_is_a_422_naming_it(body, loc, msg):
    settings = RewardSettings(rule=RewardRule(kind="pattern", pattern=(0.0, 1.0, 0.5)))
    with TestClient(create_app(settings)) as client:
        resp = client.post("/verify", json=body)
    assert resp.status_code == 422, resp.text
    [error] = resp.json()["detail"]
    assert (error["loc"], msg in error["msg"]) == (loc, True), error


def test_missing_response_is_a_422_naming_the_field():
    with TestClient(create_app()) as client:
        resp = client.post("/verify", json={"reward": 1})
    assert resp.status_code == 422
    assert resp.json()["detail"][0]["loc"] == ["body", "response"]


@pytest.mark.parametrize("output", [5, True, 1.5, "text", {"type": "message"}])
def test_a_response_output_that_is_not_a_list_is_a_422_naming_the_field(output):
    """Found by fuzzing: a truthy scalar `output` crashed the final-answer lookup (a 500)."""
    rule = RewardRule(kind="predicate", contains="open")
    with TestClient(create_app(RewardSettings(rule=rule))) as client:
        resp = client.post("/verify", json={"response": {"output": output}})
    assert resp.status_code == 422, resp.text
    (error,) = resp.json()["detail"]
    assert (error["type"], error["loc"]) == ("list_type", ["body", "response", "output"])
    assert error["msg"].endswith(f"found {type(output).__name__}")


def test_a_response_without_output_has_no_final_answer():
    rule = RewardRule(kind="predicate", contains="open", reward_true=1.0, reward_false=0.25)
    assert _verify(RewardSettings(rule=rule), {"response": {}})["reward"] == 0.25
    assert _verify(RewardSettings(rule=rule), {"response": {"output": None}})["reward"] == 0.25


def test_oversized_body_is_a_413():
    with TestClient(create_app(RewardSettings(max_body_bytes=1024))) as client:
        resp = client.post("/verify", json={"response": {"output": [], "pad": "x" * 2000}})
    assert resp.status_code == 413
    assert "the limit is 1024" in resp.json()["detail"]


def test_incomplete_rules_are_rejected():
    with pytest.raises(ValidationError, match="needs a non-empty pattern"):
        RewardRule(kind="pattern")
    with pytest.raises(ValidationError, match="exactly one of contains= or equals="):
        RewardRule(kind="predicate")


@pytest.mark.parametrize("settings", [
    {"rule": {"kind": "fixed", "value": float("nan")}},
    {"rule": {"kind": "pattern", "pattern": [1.0, float("inf")]}},
    {"rule": {"kind": "by_index", "rewards": {0: float("-inf")}}},
    {"by_rollout_id": {"s0-g0-r0": float("nan")}},
])
def test_a_reward_that_is_not_a_finite_number_is_refused_in_the_settings(settings):
    """Refused where it is written, not later by the trainer's ingest of the reward."""
    with pytest.raises(ValidationError, match="Input should be a finite number"):
        RewardSettings.model_validate(settings)
