"""OSWorld-style exact-trace evidence: Gym's OSWorld dict emitter, transport (schema 3) projection.

It differs from the simple agent's shape (gym-contract.md §5): boundaries are inferred from
**token** and media prefixes (not declared by a policy), boundary ids are
``stable_id("rewrite-boundary", ...)`` with reason ``prompt_or_media_not_append_compatible``,
the contract carries ``identity_source`` / ``trajectory_contract_id``, metadata carries
``model_call_id`` / ``environment_step`` / ``parse_attempt`` / ``accepted`` / ``parse_error``,
lineage dispositions are ``"retained"``, and its canonical JSON uses ``allow_nan=False`` without
``default=repr``. `output` holds one assistant message per model call carrying the tokens.

Like every flavour, its items carry no per-item ``policy_version``: OSWorld's emitter is a Gym agent,
which never sees the server's version, and no scenario needs a version that changes inside one
rollout. The trainer's ``trainer_policy_version`` label on the `/run` result supplies it.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

from compactsim.agents.evidence.envelope import contract_identity, response_envelope
from compactsim.agents.rollout.record import RolloutRecord
from compactsim.agents.rollout.session import INCOMPLETE_REASONS

POLICY_NAME = "osworld_exact_prompt_trace"
POLICY_VERSION = "1"
_UNIT_ID = "osworld-materialized-model-prompt"
_UNAVAILABLE = "server-authoritative-unavailable"


def osworld_digest(value: Any) -> str:
    """OSWorld's canonical digest: sorted keys, compact, UTF-8 kept, NaN refused, no `repr` fallback."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def osworld_id(prefix: str, *parts: Any) -> str:
    return f"{prefix}-{osworld_digest(list(parts))[:24]}"


def _generation_contract(record: RolloutRecord, policy_config: dict[str, Any]) -> dict[str, Any]:
    components = {
        "model_contract_id": osworld_id("model-contract", {"model_name": record.spec.sampling.model or "policy",
                                                            "adapter": "osworld_agent"}),
        "tokenizer_contract_id": osworld_id("tokenizer-contract", _UNAVAILABLE),
        "template_contract_id": osworld_id("template-contract", _UNAVAILABLE),
        "sampling_contract_id": osworld_id("sampling-contract", record.spec.sampling.body()),
        "processor_contract_id": osworld_id("processor-contract", _UNAVAILABLE),
        "compaction_policy_id": osworld_id("compaction-policy", policy_config),
    }
    return {
        "schema_version": 1,
        **components,
        "generation_contract_id": osworld_id("generation-contract", osworld_digest(components)),
        "loss_normalization": "global_action_token_mean",
        "training_eligible": False,
        "incomplete_reasons": list(INCOMPLETE_REASONS),
    }


def _message_text(items: list[Any]) -> str:
    """The raw assistant text of one call: message text, then `name(arguments)` per tool call."""
    parts: list[str] = []
    for item in items:
        if item.get("type") == "message":
            for c in item.get("content") or []:
                if isinstance(c, dict) and isinstance(c.get("text"), str):
                    parts.append(c["text"])
        elif item.get("type") == "function_call":
            parts.append(f"{item.get('name')}({item.get('arguments')})")
    return "\n".join(parts)


def emit_osworld(record: RolloutRecord) -> dict[str, Any]:
    """The OSWorld exact-trace envelope in its transport (schema 3) projection."""
    if record.failure is not None or not record.calls:
        raise ValueError(f"rollout {record.rollout_id!r} has no completed calls to emit")
    rid = record.rollout_id
    policy_config = record.spec.context_history.model_dump(mode="json")
    contract = _generation_contract(record, policy_config)
    contract_id = contract["generation_contract_id"]
    config_digest = osworld_digest(policy_config)

    media_assets: dict[str, dict[str, Any]] = {}
    for media_id, asset in record.media_assets.items():
        media_assets[media_id] = {
            "media_id": media_id,
            "content_digest": osworld_digest(asset["source_part"]),
            "source_part": dict(asset["source_part"]),
            "original_dimensions": None,
            "color_mode": None,
            "source_format": None,
        }

    output: list[dict[str, Any]] = []
    metadata: list[dict[str, Any]] = []
    boundaries: list[dict[str, Any]] = []
    deltas: list[dict[str, Any]] = []
    previous_context: list[int] = []
    previous_media: list[str] = []
    previous_view: str | None = None
    previous_transform: str | None = None
    segment_index, segment_id = -1, ""
    decision: dict[str, Any] = {}
    for call in record.calls:
        obs = call.observed
        turn = obs.turn_id
        prompt, sampled, logprobs = list(obs.prompt_token_ids), list(obs.sampled_token_ids), list(obs.sampled_logprobs)
        media_ids = list(obs.media_ids)
        compatible = (
            turn > 1 and previous_context == prompt[: len(previous_context)] and previous_media == media_ids[: len(previous_media)]
        )
        view = osworld_digest({"prompt_token_ids": prompt, "media_ids": media_ids})
        transform = osworld_id("transformation", rid, turn, view, config_digest)
        unit = {"source_unit_id": _UNIT_ID, "source_digest": view, "disposition": "retained",
                "output_unit_ids": [_UNIT_ID], "output_digests": [view]}
        deltas.append({
            "transformation_id": transform, "parent_transformation_id": previous_transform,
            "transformation_type": "osworld_prompt_materialization", "transformation_version": POLICY_VERSION,
            "configuration_digest": config_digest, "deterministic": True, "lossy": True,
            "generator_contract_id": contract_id, "unit_upserts": [unit], "source_unit_count": 1,
            "state_digest": osworld_digest([unit]), "validator_result": "passed",
        })
        decision = {
            "policy_name": POLICY_NAME, "policy_version": POLICY_VERSION, "config_digest": config_digest,
            "protected_part_ids": [], "changed_part_ranges": [], "retained_part_count": 1, "omitted_part_count": 0,
            "selection_digest": view, "inserted_artifact_ids": [], "decision_turn": turn,
            "lineage": {"transformation_id": transform, "transformation_type": "osworld_prompt_materialization",
                        "transformation_version": POLICY_VERSION, "configuration_digest": config_digest,
                        "deterministic": True, "lossy": True, "generator_contract_id": contract_id,
                        "unit_records": [unit], "validator_result": "passed"},
        }
        event_id = None
        if not compatible:
            segment_index += 1
            segment_id = osworld_id("segment", rid, segment_index, view)
            if turn > 1:
                event_id = osworld_id("rewrite-boundary", rid, turn, previous_view, view)
                boundaries.append({
                    "event_id": event_id, "trigger_after_step": turn - 1, "applies_to_step": turn,
                    "reason": "prompt_or_media_not_append_compatible", "policy_name": POLICY_NAME,
                    "policy_version": POLICY_VERSION, "config_digest": config_digest,
                    "previous_view_digest": previous_view, "current_view_digest": view, "changed_part_ranges": [],
                    "retained_part_count": 1, "omitted_part_count": 0, "retained_media_count": len(media_ids),
                    "removed_media_count": sum(m not in media_ids for m in previous_media),
                    "inserted_artifact_ids": [], "schedule_name": "per_action", "schedule_version": POLICY_VERSION,
                    "schedule_config_digest": config_digest, "chunk_id": segment_id, "block_index": segment_index,
                })
        completion_id = osworld_id("completion", rid, turn, prompt, sampled)
        action_id = f"policy-action-{turn:06d}"
        prepared_id = osworld_id("prepared-request", rid, turn, view, contract_id)
        request_id = osworld_id("request", prepared_id, prompt, media_ids)
        model_call_id = osworld_id("model-call", rid, turn)
        seen: Counter[str] = Counter()
        occurrences = []
        for media_id in media_ids:
            occurrences.append({"media_id": media_id, "occurrence_ordinal": seen[media_id], "model_call_id": model_call_id,
                                "placeholder_span_or_position": None, "processed_dimensions": None,
                                "model_specific_sidecars": {}})
            seen[media_id] += 1
        metadata.append({
            "rollout_id": rid, "completion_id": completion_id, "action_id": action_id, "model_call_id": model_call_id,
            "turn_id": turn, "environment_step": turn - 1, "parse_attempt": 1, "accepted": True, "parse_error": None,
            "prepared_request_id": prepared_id, "request_id": request_id, "context_epoch": segment_index,
            "segment_index": segment_index, "segment_id": segment_id, "expected_append_compatible": compatible,
            "compaction_event_id": event_id, "finish_reason": obs.finish_reason, "media_ids": media_ids,
            "policy_decision": {"policy_name": POLICY_NAME, "policy_version": POLICY_VERSION,
                                "config_digest": config_digest, "decision_turn": turn, "selection_digest": view,
                                "transformation_id": transform},
            "generation_contract_id": contract_id,
            "policy_output_spans": [{
                "policy_output_span_id": osworld_id("policy-output-span", model_call_id, action_id, len(sampled)),
                "model_call_id": model_call_id, "action_ids": [action_id], "start": 0, "end": len(sampled),
                "eligible": True, "old_logprobs_alignment": "sampled_tokens"}],
            "media_occurrences": occurrences, "processor_fingerprint": None, "eligible": True,
            "evidence_source": "generation_response",
            "generation_evidence_digest": osworld_digest(
                {"prompt_token_ids": prompt, "sampled_token_ids": sampled, "sampled_logprobs": logprobs}),
        })
        item: dict[str, Any] = {
            "id": completion_id, "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "annotations": [], "text": _message_text(call.output_items)}],
            "prompt_token_ids": prompt, "generation_token_ids": sampled, "generation_log_probs": logprobs,
        }
        token_item = call.token_item
        if token_item.get("routed_experts") is not None:
            item["routed_experts"] = token_item["routed_experts"]
        output.append(item)
        previous_context, previous_media = prompt + sampled, media_ids
        previous_view, previous_transform = view, transform

    out = response_envelope(record, output)
    out["media_assets"] = media_assets
    out["model_call_metadata"] = metadata
    out["final_policy_decision"] = decision
    out["lineage_deltas"] = deltas
    out["chunk_records"] = []
    out["boundary_events"] = boundaries
    out["guard_records"] = []
    out["context_compaction_contract"] = {
        "schema_version": 3,
        "mode": "exact_trace_authority",
        **contract_identity(record),
        "identity_source": "caller",
        "trajectory_contract_id": osworld_id("trajectory-contract", rid, record.spec.group_id, record.spec.task_id),
        "generation_contract": contract,
    }
    return out


__all__ = ["POLICY_NAME", "POLICY_VERSION", "emit_osworld", "osworld_digest", "osworld_id"]
