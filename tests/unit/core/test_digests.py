"""Gym's digest and id formulas, proved on the reference §8 payload."""

from __future__ import annotations

import hashlib
import json

from compactsim.harness.core.digests import (
    canonical_digest,
    canonical_json,
    generation_evidence_digest,
    ordered_id_digest,
    stable_id,
)


def test_canonical_json_sorts_keys_and_drops_spaces():
    assert canonical_json({"b": [1, 2.0], "a": "é"}) == '{"a":"é","b":[1,2.0]}'


def test_stable_id_does_not_hash_its_prefix():
    assert stable_id("x", 1, "a") == "x-" + canonical_digest([1, "a"])[:24]
    assert stable_id("x", 1, "a")[2:] == stable_id("y", 1, "a")[2:]


def test_ordered_id_digest_joins_with_unit_separator():
    assert ordered_id_digest(["a", "b"]) == hashlib.sha256(b"a\x1fb").hexdigest()


def test_generation_evidence_digest_matches_every_call_of_the_reference_example(example_transport):
    items = [i for i in example_transport["output"] if "generation_token_ids" in i]
    records = example_transport["model_call_metadata"]
    assert len(items) == len(records) == 3
    for item, rec in zip(items, records, strict=True):
        digest = generation_evidence_digest(
            item["prompt_token_ids"], item["generation_token_ids"], item["generation_log_probs"]
        )
        assert digest == rec["generation_evidence_digest"]


def test_generation_evidence_digest_formats_integral_logprobs_as_floats():
    # Gym's pydantic model coerces -1 to -1.0 before hashing; so must we.
    assert generation_evidence_digest([1], [2], [-1]) == generation_evidence_digest([1], [2], [-1.0])


def test_generation_contract_id_recomputes_from_its_six_component_ids(example_transport):
    gc = example_transport["context_compaction_contract"]["generation_contract"]
    six = {k: gc[k] for k in (
        "model_contract_id", "tokenizer_contract_id", "template_contract_id",
        "sampling_contract_id", "processor_contract_id", "compaction_policy_id",
    )}
    assert gc["generation_contract_id"] == stable_id("generation-contract", canonical_digest(six))
    unavailable = stable_id("tokenizer-contract", "server-authoritative-unavailable")
    assert gc["tokenizer_contract_id"] == unavailable
    assert gc["model_contract_id"] == stable_id(
        "model-contract", {"type": "responses_api_models", "name": "policy_model_for_compaction"}
    )


def test_completion_span_and_model_call_ids_recompute(example_transport):
    items = [i for i in example_transport["output"] if "generation_token_ids" in i]
    for item, rec in zip(items, example_transport["model_call_metadata"], strict=True):
        turn = rec["turn_id"]
        completion = f"completion-{turn:06d}-" + canonical_digest(
            {
                "rollout_id": rec["rollout_id"],
                "turn_id": turn,
                "prompt_token_ids": item["prompt_token_ids"],
                "sampled_token_ids": item["generation_token_ids"],
            }
        )[:12]
        assert rec["completion_id"] == completion
        span = rec["policy_output_spans"][0]
        assert span["model_call_id"] == stable_id("model-call", rec["request_id"], rec["completion_id"])
        assert span["policy_output_span_id"] == stable_id(
            "policy-output-span", span["model_call_id"], rec["action_id"], len(item["generation_token_ids"])
        )


def test_boundary_event_id_recomputes_from_view_digests(example_transport):
    event = example_transport["boundary_events"][0]
    expected = "boundary-000003-" + canonical_digest(
        {
            "rollout_id": "rollout-demo-0",
            "applies_to_step": 3,
            "previous_view_digest": event["previous_view_digest"],
            "current_view_digest": event["current_view_digest"],
        }
    )[:12]
    assert event["event_id"] == expected


def test_media_id_is_the_digest_of_the_registered_part(example_transport):
    (asset,) = example_transport["media_assets"].values()
    part = asset["source_part"]
    digest = hashlib.sha256(
        json.dumps(part, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    assert asset["content_digest"] == digest == canonical_digest(part)
    assert asset["media_id"] == "media-" + digest[:24]
