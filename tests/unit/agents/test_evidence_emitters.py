"""Every flavour the emitters produce validates, binds metadata to tokens, and plans as the agent expects."""

from __future__ import annotations

import pytest

from compactsim.agents.evidence import emit_response, emit_result
from compactsim.agents.rollout.ground_truth import ground_truth_log
from compactsim.agents.rollout.record import RolloutFailure
from compactsim.harness.core.contract import GymResponse, RunResult
from compactsim.harness.core.digests import generation_evidence_digest
from compactsim.harness.core.errors import ContractError
from compactsim.harness.pipeline.planner import plan_rollout
from tests.unit.agents.agent_helpers import make_spec

CONTRACT_FLAVOURS = ("gym-0.7.0-transport", "gym-0.7.0-full", "gym-pr2870", "osworld")


def _token_items(response):
    return [it for it in response["output"] if "generation_token_ids" in it]


@pytest.fixture(scope="module")
def k2_record(request):
    """A 6-call recency-images-k2 rollout (boundaries at 4, 5, 6) recorded against the mock server."""
    from fastapi.testclient import TestClient

    from compactsim.agents.collect import server_script
    from compactsim.agents.rollout.loop import ScriptedAgent
    from compactsim.mock_servers.model_server import ServerSettings, create_app


    spec = make_spec("recency-images-k2")
    with TestClient(create_app(ServerSettings(script=server_script([spec])))) as client:
        return ScriptedAgent(client).run(spec)


@pytest.mark.parametrize("flavour", [*CONTRACT_FLAVOURS, "none"])
def test_every_flavour_validates_against_the_contract_models(k2_record, flavour):
    result = emit_result(k2_record, flavour, reward=1.0)
    RunResult.model_validate(result)
    GymResponse.model_validate(result["response"])
    assert result["reward"] == 1.0
    assert result["responses_create_params"]["input"] == [dict(it) for it in k2_record.agent_input]


@pytest.mark.parametrize("flavour", CONTRACT_FLAVOURS)
def test_contract_flavours_plan_into_the_declared_segments(k2_record, flavour):
    plan = plan_rollout(emit_result(k2_record, flavour, reward=0.0))
    expected = ground_truth_log(k2_record)["expected"]["segments_declared"]
    assert [list(t.turn_ids) for t in plan.traces] == [s["turn_ids"] for s in expected] == [[1, 2, 3], [4], [5], [6]]
    assert [list(t.media_ids) for t in plan.traces] == [s["media_ids"] for s in expected]
    assert [t.num_tokens for t in plan.traces] == [s["num_tokens"] for s in expected]


def test_compacted_rollout_without_contract_is_an_undeclared_discontinuity(k2_record):
    with pytest.raises(ContractError) as exc:
        plan_rollout(emit_result(k2_record, "none", reward=0.0))
    assert exc.value.code == "undeclared_discontinuity"
    assert exc.value.turn_id == 4


@pytest.mark.parametrize("flavour", ["gym-0.7.0-transport", "gym-pr2870", "osworld"])
def test_transport_metadata_digests_recompute_from_output_arrays(k2_record, flavour):
    response = emit_response(k2_record, flavour)
    items = _token_items(response)
    assert len(items) == len(response["model_call_metadata"]) == 6
    for item, meta in zip(items, response["model_call_metadata"]):
        assert meta["generation_evidence_digest"] == generation_evidence_digest(
            item["prompt_token_ids"], item["generation_token_ids"], item["generation_log_probs"])
        assert set(meta["media_ids"]) <= set(response["media_assets"])
        assert [o["media_id"] for o in meta["media_occurrences"]] == meta["media_ids"]
        assert meta["policy_output_spans"][0]["end"] == len(item["generation_token_ids"])


@pytest.mark.parametrize("flavour", ["gym-0.7.0-transport", "gym-pr2870"])
def test_transport_projection_drops_image_parts_from_output(k2_record, flavour):
    response = emit_response(k2_record, flavour)
    parts = [p for it in response["output"] for p in (it.get("content") if isinstance(it.get("content"), list) else [])]
    assert not [p for p in parts if p.get("type") == "input_image"]
    assert len(response["media_assets"]) == 5


def test_full_envelope_keeps_images_and_token_arrays(k2_record):
    response = emit_response(k2_record, "gym-0.7.0-full")
    images = [p for it in response["output"] if isinstance(it.get("content"), list)
              for p in it["content"] if p.get("type") == "input_image"]
    assert len(images) == 5
    evidence = response["completion_evidence"]
    assert [e["sampled_token_ids"] for e in evidence] == [it["generation_token_ids"] for it in _token_items(response)]
    assert response["context_compaction_contract"]["schema_version"] == 2
    assert "model_call_metadata" not in response


def test_boundary_events_are_referenced_by_the_calls_they_apply_to(k2_record):
    response = emit_response(k2_record, "gym-0.7.0-transport")
    events = {b["event_id"]: b for b in response["boundary_events"]}
    referenced = {m["compaction_event_id"]: m["turn_id"] for m in response["model_call_metadata"] if m["compaction_event_id"]}
    assert referenced == {eid: b["applies_to_step"] for eid, b in events.items()}
    for b in events.values():
        assert b["trigger_after_step"] == b["applies_to_step"] - 1
        assert b["event_id"].startswith(f"boundary-{b['applies_to_step']:06d}-")


def test_pr2870_shape_has_no_schema_version_or_mode(k2_record):
    response = emit_response(k2_record, "gym-pr2870")
    assert "context_compaction_contract" not in response
    contract = response["rollout_trace_contract"]
    assert list(contract) == ["rollout_id", "group_id", "task_id", "rollout_index", "attempt_index", "generation_contract"]


def test_osworld_shape_carries_its_extras_and_token_inferred_boundaries(k2_record):
    response = emit_response(k2_record, "osworld")
    contract = response["context_compaction_contract"]
    assert contract["identity_source"] == "caller" and contract["trajectory_contract_id"].startswith("trajectory-contract-")
    meta = response["model_call_metadata"][0]
    assert {"model_call_id", "environment_step", "parse_attempt", "accepted", "parse_error"} <= set(meta)
    assert meta["action_id"] == "policy-action-000001"
    assert [b["applies_to_step"] for b in response["boundary_events"]] == [4, 5, 6]
    assert all(b["event_id"].startswith("rewrite-boundary-") for b in response["boundary_events"])
    assert {b["reason"] for b in response["boundary_events"]} == {"prompt_or_media_not_append_compatible"}
    assert response["lineage_deltas"][0]["unit_upserts"][0]["disposition"] == "retained"
    assert len(response["output"]) == 6


def test_plain_response_has_no_contract_and_keeps_the_token_items(k2_record):
    response = emit_response(k2_record, "none")
    assert not {"context_compaction_contract", "rollout_trace_contract", "model_call_metadata", "media_assets"} & set(response)
    assert len(_token_items(response)) == 6
    assert not any("policy_version" in it for it in _token_items(response))  # Gym drops the server's version


def test_identity_rollout_without_contract_plans_as_one_single_trace(run_agent, spec_for):
    record = run_agent(spec_for("identity", flavour="none", turns=4))
    plan = plan_rollout(emit_result(record, reward=1.0))
    assert plan.path == "single"
    assert [list(t.turn_ids) for t in plan.traces] == [[1, 2, 3, 4]]


def test_mask_sample_rides_in_instance_config(k2_record):
    assert emit_result(k2_record, reward=0.5, mask_sample=True)["instance_config"] == {"mask_sample": True}
    assert "instance_config" not in emit_result(k2_record, reward=0.5)


def test_lineage_can_be_left_out_of_the_transport(k2_record):
    lean = emit_response(k2_record, "gym-0.7.0-transport", include_lineage=False)
    assert "lineage_deltas" not in lean and "final_policy_decision" not in lean
    full = emit_response(k2_record, "gym-0.7.0-transport")
    assert len(full["lineage_deltas"]) == 6 and full["final_policy_decision"]["decision_turn"] == 6


def test_failed_rollout_has_nothing_to_emit(k2_record):
    from dataclasses import replace

    failed = replace(k2_record, failure=RolloutFailure("timeout", 3, 3, "ReadTimeout"))
    with pytest.raises(ValueError, match=r"rollout 'rollout-0' failed \(timeout at turn 3\)"):
        emit_result(failed)


def test_unknown_flavour_is_rejected(k2_record):
    with pytest.raises(ValueError, match="flavour='gym-9'"):
        emit_response(k2_record, "gym-9")  # type: ignore[arg-type]
