"""Issue 14 item 3: compactsim's agents emit Gym's output items exactly (no per-item `policy_version`);
the generation version a trainer needs comes from its own label on the `/run` result."""

from __future__ import annotations

import pytest

from compactsim.agents.evidence import emit_result
from compactsim.harness.core.contract import TRAINER_POLICY_VERSION, with_trainer_policy_version
from compactsim.harness.pipeline.materializer import materialize
from compactsim.harness.pipeline.planner import plan_rollout
from compactsim.harness.pipeline.train_config import TrainerConfig
from tests.unit.agents.agent_helpers import make_spec

GYM_FLAVOURS = ("gym-0.7.0-transport", "gym-0.7.0-full", "gym-pr2870")
#: The fields of Gym 0.7.0's `…ForTraining` output items as it dumps them (gym-contract.md §1.5, §8):
#: `TokenIDLogProbMixin` plus the openai item's own fields. Written out here, not taken from our emitter.
_TOKEN_MIXIN = {"prompt_token_ids", "generation_token_ids", "generation_log_probs", "routed_experts"}
GYM_TRAINING_ITEM_FIELDS = {
    "message": _TOKEN_MIXIN | {"id", "content", "role", "status", "type", "phase"},
    "function_call": _TOKEN_MIXIN | {"arguments", "call_id", "name", "type", "id", "status", "namespace"},
    "reasoning": _TOKEN_MIXIN | {"id", "summary", "type", "encrypted_content", "content"},
}


@pytest.fixture(scope="module")
def record():
    """A 6-call recency-images-k2 rollout recorded against the mock server (which reports policy_version 0)."""
    from fastapi.testclient import TestClient

    from compactsim.agents.collect import server_script
    from compactsim.agents.rollout.loop import ScriptedAgent
    from compactsim.mock_servers.model_server import ServerSettings, create_app

    spec = make_spec("recency-images-k2")
    with TestClient(create_app(ServerSettings(script=server_script([spec])))) as client:
        return ScriptedAgent(client).run(spec)


def _cfg() -> TrainerConfig:
    return TrainerConfig.model_validate({
        "grpo": {"num_prompts_per_step": 1, "num_generations_per_prompt": 1},
        "policy": {"train_global_batch_size": 1, "logprob_dtype": "float64"},
    })


def _token_items(result):
    return [it for it in result["response"]["output"] if "generation_token_ids" in it]


def test_the_server_reported_a_version_that_the_call_log_keeps(record):
    assert [c.policy_version for c in record.calls] == [0] * 6
    assert all(c.response.get("policy_version") == 0 for c in record.calls)


@pytest.mark.parametrize("flavour", GYM_FLAVOURS)
def test_gym_flavour_items_carry_exactly_gyms_item_fields(record, flavour):
    result = emit_result(record, flavour, reward=1.0)
    items = _token_items(result)
    assert len(items) == 6
    for item in items:
        assert set(item) == GYM_TRAINING_ITEM_FIELDS[item["type"]], item["type"]
    assert not any("policy_version" in it for it in result["response"]["output"])
    assert TRAINER_POLICY_VERSION not in result  # the label is the collector's, not the agent's


@pytest.mark.parametrize("flavour", ["osworld", "none"])
def test_no_flavour_writes_a_per_item_policy_version(record, flavour):
    result = emit_result(record, flavour, reward=1.0)
    assert _token_items(result)
    assert not any("policy_version" in it for it in result["response"]["output"])


@pytest.mark.parametrize("flavour", [*GYM_FLAVOURS, "osworld"])  # "none" cannot plan a compacted rollout
def test_rows_take_their_generation_version_from_the_trainers_label(record, flavour):
    bare = emit_result(record, flavour, reward=1.0)
    unlabelled = materialize([plan_rollout(bare)], _cfg())
    real = unlabelled.row_sample_mask > 0
    assert set(unlabelled.row_generation_policy_version[real].tolist()) == {-1}  # Gym's items alone: unknown

    labelled = materialize([plan_rollout(with_trainer_policy_version(bare, 7))], _cfg())
    real = labelled.row_sample_mask > 0
    assert real.any()
    assert set(labelled.row_generation_policy_version[real].tolist()) == {7}
    assert {r.generation_policy_version for r in labelled.logical} == {7}


def test_the_label_must_be_a_version():
    for bad in (-1, True, 1.5, 2**31):
        with pytest.raises(ValueError, match="non-negative int32"):
            with_trainer_policy_version({}, bad)  # type: ignore[arg-type]
