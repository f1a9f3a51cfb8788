"""The §8 reference rollout (real nemo-gym 0.7.0 output) replayed through our session reproduces every id."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from compactsim.agents.evidence import emit_full, emit_pr2870, emit_transport
from compactsim.agents.rollout.session import EvidenceViolation, capture_observed_completion
from compactsim.harness.core.digests import generation_evidence_digest, stable_id


def _as_documented(doc: dict[str, Any], example: dict[str, Any]) -> dict[str, Any]:
    """Ours edited the way the §8 document was: `status` and the null top-level fields of Gym's dump dropped."""
    return {k: v for k, v in doc.items() if k != "status" and not (v is None and k not in example)}


def test_reference_generation_evidence_digests_recompute_from_output_arrays(example_transport):
    token_items = [it for it in example_transport["output"] if "generation_token_ids" in it]
    digests = [generation_evidence_digest(it["prompt_token_ids"], it["generation_token_ids"], it["generation_log_probs"])
               for it in token_items]
    assert digests == [m["generation_evidence_digest"] for m in example_transport["model_call_metadata"]]


def test_reference_model_call_metadata_is_reproduced_field_for_field(reference_record, example_transport):
    ours = [c.observed.metadata_json() for c in reference_record.calls]
    assert ours == example_transport["model_call_metadata"]


def test_reference_boundary_event_is_reproduced_exactly(reference_record, example_transport):
    assert [b.to_json() for b in reference_record.boundary_events] == example_transport["boundary_events"]
    event = reference_record.boundary_events[0]
    assert event.event_id == "boundary-000003-0bdeaecd1711"
    assert (event.trigger_after_step, event.applies_to_step) == (2, 3)
    assert (event.retained_media_count, event.removed_media_count) == (1, 0)
    assert event.changed_part_ranges == (("part-000001-000", "part-000001-000"),)


def test_reference_transport_emission_equals_the_gym_document(reference_record, example_transport):
    ours = emit_transport(reference_record, include_lineage=False)
    assert _as_documented(ours, example_transport) == example_transport


def test_reference_pr2870_emission_equals_the_renamed_document(reference_record, example_pr2870):
    ours = emit_pr2870(reference_record, include_lineage=False)
    assert _as_documented(ours, example_pr2870) == example_pr2870


def test_reference_lineage_matches_gym_transformation_chain(reference_record, example_transport):
    deltas = reference_record.lineage_deltas
    transforms = [m["policy_decision"]["transformation_id"] for m in example_transport["model_call_metadata"]]
    assert [d.transformation_id for d in deltas] == transforms
    assert [d.parent_transformation_id for d in deltas] == [None, transforms[0], transforms[1]]
    assert [len(d.unit_upserts) for d in deltas] == [1, 4, 4]
    assert [d.lossy for d in deltas] == [False, False, True]
    assert reference_record.final_policy_decision.decision_turn == 3
    assert len(reference_record.final_policy_decision.lineage.unit_records) == 8


def test_reference_full_envelope_carries_arrays_and_images(reference_record, example_transport):
    full = emit_full(reference_record)
    assert full["context_compaction_contract"]["schema_version"] == 2
    assert full["agent_input"] == [{"content": "Open the settings app.", "role": "user", "type": "message", "phase": None}]
    evidence = full["completion_evidence"]
    assert [e["prompt_token_ids"] for e in evidence] == [
        it["prompt_token_ids"] for it in example_transport["output"] if "prompt_token_ids" in it
    ]
    observation = full["output"][2]
    assert [p["type"] for p in observation["content"]] == ["input_image", "input_text"]
    assert "model_call_metadata" not in full


def test_reference_request_ids_follow_the_documented_formulas(reference_record):
    for call in reference_record.calls:
        obs = call.observed
        assert obs.request_id == stable_id("request", obs.prepared_request_id, list(obs.prompt_token_ids), list(obs.media_ids))
        assert obs.model_call_id == stable_id("model-call", obs.request_id, obs.completion_id)


def test_reference_second_call_requires_the_first_calls_tokens_as_prefix(reference_record):
    assert reference_record.calls[1].prepared.required_prefix_token_ids == (1, 2, 3, 11, 12)
    assert reference_record.calls[2].prepared.required_prefix_token_ids is None


def test_capture_rejects_prompt_without_required_prefix(reference_record):
    call = reference_record.calls[1]
    output = copy.deepcopy(call.output_items)
    output[-1]["prompt_token_ids"] = [9, 9, 9]
    with pytest.raises(EvidenceViolation) as exc:
        capture_observed_completion(output, rollout_id="rollout-demo-0", call=call.prepared,
                                    generation_contract_id="g", finish_reason=None)
    assert exc.value.rule == "required_prefix"
    assert str(exc.value) == ("Generation-observed prompt does not contain the required exact prefix: "
                              "required_count=5 prompt_count=3")


def test_capture_rejects_two_token_bearing_items(reference_record):
    call = reference_record.calls[0]
    output = copy.deepcopy(call.output_items)
    output[0].update({k: output[1][k] for k in ("prompt_token_ids", "generation_token_ids", "generation_log_probs")})
    with pytest.raises(EvidenceViolation) as exc:
        capture_observed_completion(output, rollout_id="r", call=call.prepared, generation_contract_id="g",
                                    finish_reason=None)
    assert exc.value.rule == "missing_token_evidence"
    assert str(exc.value) == "Expected exactly one generation evidence item for a model call, found 2"


def test_capture_rejects_logprob_length_mismatch(reference_record):
    call = reference_record.calls[0]
    output = copy.deepcopy(call.output_items)
    output[-1]["generation_log_probs"] = [-0.5]
    with pytest.raises(EvidenceViolation) as exc:
        capture_observed_completion(output, rollout_id="r", call=call.prepared, generation_contract_id="g",
                                    finish_reason=None)
    assert exc.value.rule == "token_logprob_length"
    assert str(exc.value) == "sampled token/logprob length mismatch: tokens=2 logprobs=1"
