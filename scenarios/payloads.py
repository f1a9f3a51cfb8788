"""Hand-sized Gym payloads: describe calls, get a valid result in any flavour.

Follows Gym's formulas where the planner reads them (digests, boundary cross-references,
media assets) and fills the rest with plausible values. It is an aid for reproducing contract
bugs by hand and for tests; the scripted agents in `agents/` emit the real evidence.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from compactsim.harness.core.digests import canonical_digest, generation_evidence_digest, stable_id

#: A valid 1x1 RGB PNG (the one in the reference example).
PNG_1X1 = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"


@dataclass
class Call:
    prompt: list[int]
    sampled: list[int]
    logprobs: list[float] | None = None
    media: list[str] = field(default_factory=list)
    #: declare a rewrite boundary applying to this call
    boundary: bool = False
    routes: Any = None
    policy_version: int | None = None


def continuing(prev: Call, extra: list[int], sampled: list[int], **kw: Any) -> Call:
    """A call whose prompt extends `prev`'s prompt + sampled ids by `extra`."""
    return Call(prompt=prev.prompt + prev.sampled + extra, sampled=sampled, **kw)


def build_response(
    calls: list[Call],
    *,
    rollout_id: str = "rollout-0",
    flavour: str = "transport",
    group_id: str | None = "group-0",
    task_id: str | None = "task-0",
    rollout_index: int = 0,
) -> dict[str, Any]:
    """A bare Gym response; flavour is transport | full | pr2870 | osworld | none."""
    output: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    media_ids = sorted({m for c in calls for m in c.media})
    epoch = 0
    for index, c in enumerate(calls):
        turn = index + 1
        logprobs = c.logprobs if c.logprobs is not None else [-0.5] * len(c.sampled)
        item: dict[str, Any] = {
            "type": "message",
            "id": f"msg_{turn}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": f"step {turn}", "annotations": []}],
            "prompt_token_ids": list(c.prompt),
            "generation_token_ids": list(c.sampled),
            "generation_log_probs": list(logprobs),
            "routed_experts": c.routes,
        }
        if c.policy_version is not None:
            item["policy_version"] = c.policy_version
        output.append({"type": "reasoning", "id": f"rs_{turn}", "summary": []})
        output.append(item)
        event_id = None
        if c.boundary:
            epoch += 1
            event_id = f"boundary-{turn:06d}-" + canonical_digest({"rollout_id": rollout_id, "turn": turn})[:12]
            events.append(
                {
                    "event_id": event_id,
                    "trigger_after_step": turn - 1,
                    "applies_to_step": turn,
                    "reason": "history_policy_rewrite",
                    "policy_name": "recency",
                    "policy_version": "2",
                    "config_digest": "0" * 64,
                    "previous_view_digest": "1" * 64,
                    "current_view_digest": "2" * 64,
                    "changed_part_ranges": [],
                    "retained_part_count": 1,
                    "omitted_part_count": 1,
                    "retained_media_count": len(c.media),
                    "removed_media_count": 0,
                    "inserted_artifact_ids": [],
                    "schedule_name": "per_action",
                    "schedule_version": "1",
                    "schedule_config_digest": None,
                    "chunk_id": None,
                    "block_index": None,
                }
            )
        record: dict[str, Any] = {
            "rollout_id": rollout_id,
            "completion_id": f"completion-{turn:06d}-x",
            "action_id": f"action-{turn:06d}",
            "turn_id": turn,
            "context_epoch": epoch,
            "segment_index": epoch,
            "expected_append_compatible": index > 0 and not c.boundary,
            "compaction_event_id": event_id,
            "finish_reason": None,
            "media_ids": list(c.media),
            "eligible": True,
            "evidence_source": "generation_response",
        }
        if flavour == "full":
            record.update(
                prompt_token_ids=list(c.prompt), sampled_token_ids=list(c.sampled), sampled_logprobs=list(logprobs)
            )
        else:
            record["generation_evidence_digest"] = generation_evidence_digest(c.prompt, c.sampled, logprobs)
        if flavour == "osworld":
            record.update(model_call_id=f"model-call-{turn}", environment_step=turn, parse_attempt=0, accepted=True)
        records.append(record)
    response: dict[str, Any] = {
        "id": f"resp-{rollout_id}",
        "created_at": 1.0,
        "model": "policy",
        "object": "response",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    if flavour == "none":
        return response
    six = {
        "model_contract_id": stable_id("model-contract", "m"),
        "tokenizer_contract_id": stable_id("tokenizer-contract", "t"),
        "template_contract_id": stable_id("template-contract", "t"),
        "sampling_contract_id": stable_id("sampling-contract", "s"),
        "processor_contract_id": stable_id("processor-contract", "p"),
        "compaction_policy_id": stable_id("compaction-policy", "c"),
    }
    contract: dict[str, Any] = {
        "rollout_id": rollout_id,
        "group_id": group_id,
        "task_id": task_id,
        "rollout_index": rollout_index,
        "attempt_index": 0,
        "generation_contract": {
            "schema_version": 1,
            **six,
            "generation_contract_id": stable_id("generation-contract", canonical_digest(six)),
            "loss_normalization": "global_action_token_mean",
            "training_eligible": False,
            "incomplete_reasons": [],
        },
    }
    response["media_assets"] = {
        m: {
            "media_id": m,
            "content_digest": canonical_digest(m),
            "source_part": {"type": "input_image", "image_url": PNG_1X1, "detail": "auto"},
            "original_dimensions": [1, 1],
            "color_mode": "RGB",
            "source_format": "png",
        }
        for m in media_ids
    }
    response["boundary_events"] = events
    response["chunk_records"] = []
    response["guard_records"] = []
    if flavour == "full":
        response["completion_evidence"] = records
        response["context_compaction_contract"] = {"schema_version": 2, "mode": "exact_trace_authority", **contract}
    elif flavour == "transport":
        response["model_call_metadata"] = records
        response["context_compaction_contract"] = {"schema_version": 3, "mode": "exact_trace_authority", **contract}
    elif flavour == "pr2870":
        response["model_call_metadata"] = records
        response["rollout_trace_contract"] = contract
    elif flavour == "osworld":
        response["model_call_metadata"] = records
        response["context_compaction_contract"] = {
            "schema_version": 3,
            "mode": "exact_trace_authority",
            "identity_source": "osworld",
            "trajectory_contract_id": "trajectory-contract-0",
            **contract,
        }
    else:
        raise ValueError(f"unknown flavour {flavour!r}")
    return response


def run_result(response: dict[str, Any], reward: float = 1.0, mask_sample: bool = False) -> dict[str, Any]:
    """Wrap a response the way Gym's /run returns it to a trainer."""
    return {"response": copy.deepcopy(response), "reward": reward, "instance_config": {"mask_sample": mask_sample}}


def compacted_three_calls(flavour: str = "transport", media: bool = True) -> dict[str, Any]:
    """Calls 1-2 append-compatible, boundary before call 3 (like the reference example)."""
    c1 = Call([1, 2, 3], [11, 12])
    c2 = continuing(c1, [4, 900, 5], [21, 22], media=["screen-a"] if media else [])
    c3 = Call([1, 2, 3, 12, 4, 900, 5, 21, 22, 6, 7], [31, 32, 33], media=["screen-a", "screen-b"] if media else [], boundary=True)
    return build_response([c1, c2, c3], flavour=flavour)
