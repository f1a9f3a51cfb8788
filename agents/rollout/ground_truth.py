"""The ground-truth log of one rollout: what was sent, what came back, where it compacted and why.

It is written by the agent from its own record, never from the pipeline, so an independent
oracle can derive the expected physical traces and rows from it alone. Format
``compactsim.ground_truth`` version 1 (one JSON object per rollout)::

    format, version
    rollout:  ids, seed, flavour, sends_required_prefix, context_history, policy, schedule, max_steps,
              generation_contract_id
    outcome:  status ("completed" | "failed"), stop_reason, failure, num_calls, reward, mask_sample
    media:    {media_id: {spec, content_digest, data_url, width, height, first_shown_turn}}
    calls[]:  turn_id, attempts[], ids{...},
              sent{input (images as {"type","media_id","detail"}), descriptor, media_ids, view_digest,
                   required_prefix_token_count, metadata},
              received{response_id, policy_version, finish_reason, prompt_token_ids, generation_token_ids,
                       generation_log_probs, routed_experts, output_items (no token fields)},
              compaction{declared_append_compatible, context_epoch, segment_index, boundary|null, decision},
              continuity{tokens_extend_previous, media_extend_previous, previous_context_length,
                         mismatch_offset},
              observations[] (images as media refs)
    expected: segments_declared[], segments_by_tokens[], single_trace_ok, first_discontinuity,
              declaration_violations[]

`segments_*` entries have the shape of `PhysicalTrace.to_json()` plus ``trace_index`` and
``start_turn``; ``num_tokens`` is the last call's prompt + sampled length and ``media_ids`` the
last call's (all of a trace's images, re-owned at a boundary).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from compactsim.agents.items import TOKEN_FIELDS, is_image_part
from compactsim.agents.media.arena import media_id_for
from compactsim.agents.rollout.record import ModelCallLog, RolloutRecord
from compactsim.harness.core.trace_plan import physical_trace_id

FORMAT = "compactsim.ground_truth"
VERSION = 1


def _media_ref_items(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Items with every image part replaced by a reference to its media id (pixels live in `media`)."""
    out: list[dict[str, Any]] = []
    for item in items:
        item = dict(item)
        content = item.get("content")
        if isinstance(content, list):
            item["content"] = [
                {"type": p.get("type"), "media_id": media_id_for(p), "detail": p.get("detail")}
                if is_image_part(p) else p
                for p in content
            ]
        out.append(item)
    return out


def _strip_tokens(item: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k not in (*TOKEN_FIELDS, "routed_experts", "policy_version")}


def _first_mismatch(previous: Sequence[int], prompt: Sequence[int]) -> int | None:
    """Index of the first position where `prompt` stops extending `previous` (None: it extends it)."""
    for i, tok in enumerate(previous):
        if i >= len(prompt) or prompt[i] != tok:
            return i
    return None


def _continuity(calls: Sequence[ModelCallLog]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    previous: list[int] | None = None
    previous_media: list[str] | None = None
    for call in calls:
        obs = call.observed
        if previous is None or previous_media is None:
            out.append({"tokens_extend_previous": None, "media_extend_previous": None,
                        "previous_context_length": None, "mismatch_offset": None})
        else:
            offset = _first_mismatch(previous, obs.prompt_token_ids)
            media = list(obs.media_ids[: len(previous_media)]) == previous_media
            out.append({"tokens_extend_previous": offset is None, "media_extend_previous": media,
                        "previous_context_length": len(previous), "mismatch_offset": offset})
        previous = [*obs.prompt_token_ids, *obs.sampled_token_ids]
        previous_media = list(obs.media_ids)
    return out


def _segments(record: RolloutRecord, starts: Sequence[bool], reason: str) -> list[dict[str, Any]]:
    """Physical traces implied by `starts` (True where a call opens a new trace)."""
    groups: list[list[ModelCallLog]] = []
    for call, start in zip(record.calls, starts):
        if start or not groups:
            groups.append([])
        groups[-1].append(call)
    segments = []
    for k, group in enumerate(groups):
        last = group[-1].observed
        segments.append({
            "trace_index": k,
            "trace_id": physical_trace_id(record.rollout_id, k),
            "turn_ids": [c.turn_id for c in group],
            "start_turn": group[0].turn_id,
            "start_reason": "rollout_start" if k == 0 else reason,
            "media_ids": list(last.media_ids),
            "num_tokens": len(last.prompt_token_ids) + len(last.sampled_token_ids),
            "num_sampled_tokens": sum(len(c.observed.sampled_token_ids) for c in group),
        })
    return segments


def _boundary_detail(record: RolloutRecord, index: int) -> dict[str, Any] | None:
    call = record.calls[index]
    boundary = call.prepared.boundary
    if boundary is None:
        return None
    previous = record.calls[index - 1].prepared.prepared.view
    current = call.prepared.prepared.view
    why = []
    if tuple(current.descriptor[: len(previous.descriptor)]) != tuple(previous.descriptor):
        why.append("descriptor_not_prefix")
    if tuple(current.media_ids[: len(previous.media_ids)]) != tuple(previous.media_ids):
        why.append("media_not_prefix")
    now = set(current.descriptor)
    removed = Counter(previous.media_ids) - Counter(current.media_ids)
    return {
        **boundary.to_json(),
        "why": why,
        "dropped_from_previous_view": [d for d in previous.descriptor if d not in now],
        "new_artifacts": [d for d in current.descriptor if d.startswith("artifact:") and d not in set(previous.descriptor)],
        "removed_media_ids": sorted(removed.elements()),
    }


def _media_table(record: RolloutRecord) -> dict[str, Any]:
    first_turn: dict[str, int] = {}
    for call in record.calls:
        for media_id, _ in call.observation_images:
            first_turn.setdefault(media_id, call.turn_id)
    table: dict[str, Any] = {}
    for media_id, asset in record.media_assets.items():
        dims = asset.get("original_dimensions")
        table[media_id] = {
            "spec": dict(record.image_specs[media_id]) if media_id in record.image_specs else None,
            "content_digest": asset.get("content_digest"),
            "data_url": asset.get("source_part", {}).get("image_url"),
            "width": dims[0] if dims else None,
            "height": dims[1] if dims else None,
            "first_shown_turn": first_turn.get(media_id, 0),
        }
    return table


def _call_entry(record: RolloutRecord, index: int, continuity: Mapping[str, Any]) -> dict[str, Any]:
    call = record.calls[index]
    obs = call.observed
    prepared = call.prepared
    view = prepared.prepared.view
    token_item = call.token_item
    prefix = call.request.get("required_prefix_token_ids")
    decision = view.decision
    return {
        "turn_id": call.turn_id,
        "attempts": [a.to_json() for a in call.attempts],
        "ids": {
            "completion_id": obs.completion_id,
            "action_id": obs.action_id,
            "prepared_request_id": obs.prepared_request_id,
            "request_id": obs.request_id,
            "segment_id": obs.segment_id,
            "model_call_id": obs.model_call_id,
            "compaction_event_id": obs.compaction_event_id,
            "generation_evidence_digest": obs.generation_evidence_digest,
        },
        "sent": {
            "input": _media_ref_items(prepared.request_input),
            "descriptor": list(view.descriptor),
            "media_ids": list(view.media_ids),
            "view_digest": prepared.prepared.view_digest,
            "required_prefix_token_count": len(prefix) if isinstance(prefix, list) else None,
            "metadata": dict(call.request.get("metadata") or {}),
        },
        "received": {
            "response_id": call.response.get("id"),
            "policy_version": call.policy_version,
            "finish_reason": obs.finish_reason,
            "prompt_token_ids": list(obs.prompt_token_ids),
            "generation_token_ids": list(obs.sampled_token_ids),
            "generation_log_probs": list(obs.sampled_logprobs),
            "routed_experts": token_item.get("routed_experts"),
            "output_items": [_strip_tokens(it) for it in call.output_items],
        },
        "compaction": {
            "declared_append_compatible": prepared.prepared.append_compatible,
            "context_epoch": prepared.prepared.context_epoch,
            "segment_index": prepared.prepared.segment_index,
            "boundary": _boundary_detail(record, index),
            "decision": {
                "policy_name": decision.policy_name,
                "retained_part_count": decision.retained_part_count,
                "omitted_part_count": decision.omitted_part_count,
                "changed_part_ranges": [list(r) for r in decision.changed_part_ranges],
                "inserted_artifact_ids": list(decision.inserted_artifact_ids),
            },
        },
        "continuity": dict(continuity),
        "observations": _media_ref_items(call.observations),
    }


def _declaration_violations(record: RolloutRecord, continuity: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Calls whose declared append verdict disagrees with their tokens/media (empty for honest runs)."""
    out = []
    for call, cont in zip(record.calls[1:], continuity[1:]):
        declared = call.prepared.prepared.append_compatible
        tokens, media = cont["tokens_extend_previous"], cont["media_extend_previous"]
        if declared and not tokens:
            out.append({"turn_id": call.turn_id, "code": "append_declaration_mismatch"})
        elif declared and not media:
            out.append({"turn_id": call.turn_id, "code": "media_continuity"})
        elif not declared and tokens and media:
            out.append({"turn_id": call.turn_id, "code": "boundary_without_rewrite"})
    return out


def ground_truth_log(record: RolloutRecord, *, reward: float | None = None, mask_sample: bool = False) -> dict[str, Any]:
    """The ground-truth document of `record` (format above); plain JSON, deterministic."""
    spec = record.spec
    continuity = _continuity(record.calls)
    first_break = next(
        ({"turn_id": c.turn_id, "previous_context_length": cont["previous_context_length"],
          "mismatch_offset": cont["mismatch_offset"], "media_extend_previous": cont["media_extend_previous"]}
         for c, cont in zip(record.calls, continuity)
         if cont["tokens_extend_previous"] is False or cont["media_extend_previous"] is False),
        None,
    )
    declared_starts = [not c.prepared.prepared.append_compatible for c in record.calls]
    token_starts = [i == 0 or not (cont["tokens_extend_previous"] and cont["media_extend_previous"])
                    for i, cont in enumerate(continuity)]
    policy = record.final_policy_decision
    return {
        "format": FORMAT,
        "version": VERSION,
        "rollout": {
            "rollout_id": spec.rollout_id,
            "group_id": spec.group_id,
            "task_id": spec.task_id,
            "rollout_index": spec.rollout_index,
            "attempt_index": spec.attempt_index,
            "seed": spec.seed,
            "flavour": spec.flavour,
            "sends_required_prefix": spec.sends_required_prefix,
            "context_history": spec.context_history.model_dump(mode="json"),
            "policy": {
                "name": spec.context_history.policy.type,
                "version": policy.policy_version if policy else None,
                "config_digest": policy.config_digest if policy else None,
            },
            "schedule": spec.context_history.schedule.model_dump(mode="json"),
            "max_steps": spec.max_steps,
            "generation_contract_id": record.generation_contract.generation_contract_id,
        },
        "outcome": {
            "status": "completed" if record.failure is None else "failed",
            "stop_reason": record.stop_reason,
            "failure": record.failure.to_json() if record.failure else None,
            "num_calls": len(record.calls),
            "reward": reward,
            "mask_sample": mask_sample,
        },
        "media": _media_table(record),
        "calls": [_call_entry(record, i, cont) for i, cont in enumerate(continuity)],
        "expected": {
            "segments_declared": _segments(record, declared_starts, "declared_boundary"),
            "segments_by_tokens": _segments(record, token_starts, "inferred_discontinuity"),
            "single_trace_ok": first_break is None,
            "first_discontinuity": first_break,
            "declaration_violations": _declaration_violations(record, continuity),
        },
    }


def _obj(required: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "required": list(required), "properties": required, **extra}


_INTS = {"type": "array", "items": {"type": "integer"}}
_STRS = {"type": "array", "items": {"type": "string"}}
_NULL_INT = {"type": ["integer", "null"]}
_SEGMENT = _obj({
    "trace_index": {"type": "integer"}, "trace_id": {"type": "string"}, "turn_ids": _INTS,
    "start_turn": {"type": "integer"},
    "start_reason": {"enum": ["rollout_start", "declared_boundary", "inferred_discontinuity"]},
    "media_ids": _STRS, "num_tokens": {"type": "integer"}, "num_sampled_tokens": {"type": "integer"},
})

#: JSON Schema (draft 2020-12) of the ground-truth log; `tests/unit/agents` validates every log against it.
GROUND_TRUTH_SCHEMA: dict[str, Any] = _obj(
    {
        "format": {"const": FORMAT},
        "version": {"const": VERSION},
        "rollout": _obj({
            "rollout_id": {"type": "string"}, "group_id": {"type": ["string", "null"]},
            "task_id": {"type": ["string", "null"]}, "rollout_index": _NULL_INT, "attempt_index": _NULL_INT,
            "seed": {"type": "integer"}, "flavour": {"type": "string"}, "sends_required_prefix": {"type": "boolean"},
            "context_history": {"type": "object"}, "policy": {"type": "object"}, "schedule": {"type": "object"},
            "max_steps": _NULL_INT, "generation_contract_id": {"type": "string"},
        }),
        "outcome": _obj({
            "status": {"enum": ["completed", "failed"]},
            "stop_reason": {"enum": ["no_tool_call", "max_steps", "length", None]},
            "failure": {"type": ["object", "null"]}, "num_calls": {"type": "integer"},
            "reward": {"type": ["number", "null"]}, "mask_sample": {"type": "boolean"},
        }),
        "media": {"type": "object", "additionalProperties": _obj({
            "spec": {"type": ["object", "null"]}, "content_digest": {"type": ["string", "null"]},
            "data_url": {"type": ["string", "null"]}, "width": _NULL_INT, "height": _NULL_INT,
            "first_shown_turn": {"type": "integer"},
        })},
        "calls": {"type": "array", "items": _obj({
            "turn_id": {"type": "integer", "minimum": 1},
            "attempts": {"type": "array", "items": _obj({"outcome": {"type": "string"}, "detail": {"type": "string"}})},
            "ids": _obj({k: {"type": ["string", "null"]} for k in (
                "completion_id", "action_id", "prepared_request_id", "request_id", "segment_id", "model_call_id",
                "compaction_event_id", "generation_evidence_digest")}),
            "sent": _obj({"input": {"type": "array"}, "descriptor": _STRS, "media_ids": _STRS,
                          "view_digest": {"type": "string"}, "required_prefix_token_count": _NULL_INT,
                          "metadata": {"type": "object"}}),
            "received": _obj({"response_id": {"type": ["string", "null"]}, "policy_version": _NULL_INT,
                              "finish_reason": {"type": ["string", "null"]}, "prompt_token_ids": _INTS,
                              "generation_token_ids": _INTS,
                              "generation_log_probs": {"type": "array", "items": {"type": "number"}},
                              "routed_experts": {}, "output_items": {"type": "array"}}),
            "compaction": _obj({"declared_append_compatible": {"type": "boolean"},
                                "context_epoch": {"type": "integer"}, "segment_index": {"type": "integer"},
                                "boundary": {"type": ["object", "null"]}, "decision": {"type": "object"}}),
            "continuity": _obj({"tokens_extend_previous": {"type": ["boolean", "null"]},
                                "media_extend_previous": {"type": ["boolean", "null"]},
                                "previous_context_length": _NULL_INT, "mismatch_offset": _NULL_INT}),
            "observations": {"type": "array"},
        })},
        "expected": _obj({
            "segments_declared": {"type": "array", "items": _SEGMENT},
            "segments_by_tokens": {"type": "array", "items": _SEGMENT},
            "single_trace_ok": {"type": "boolean"},
            "first_discontinuity": {"type": ["object", "null"]},
            "declaration_violations": {"type": "array", "items": _obj({"turn_id": {"type": "integer"},
                                                                       "code": {"type": "string"}})},
        }),
    },
    **{"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "compactsim ground-truth log v1"},
)


__all__ = ["FORMAT", "GROUND_TRUTH_SCHEMA", "VERSION", "ground_truth_log"]
