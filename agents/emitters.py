"""Emit a recorded rollout as Gym evidence in any flavour a trainer may receive.

Flavours (gym-contract.md §1, §5, §8):

- ``gym-0.7.0-full``: `ContextCompactedResponse` (contract schema 2): `agent_input`, `seed_obs`,
  `completion_evidence` with the token arrays, images kept in `output`.
- ``gym-0.7.0-transport``: `ContextCompactedTransportResponse` (schema 3): image parts removed
  from `output`, `model_call_metadata` bound to the output arrays by `generation_evidence_digest`.
- ``gym-pr2870``: the transport shape under `rollout_trace_contract`, no `schema_version`/`mode`.
- ``osworld``: OSWorld's dict emitter (`agents.osworld`).
- ``none``: an ordinary Gym response, no contract (the legacy single-trace path).

`emit_result` wraps the response the way Gym's `/run` returns it to a trainer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.items import without_image_parts
from agents.record import RolloutRecord
from agents.script import Flavour


def _require_calls(record: RolloutRecord) -> None:
    if record.failure is not None:
        raise ValueError(
            f"rollout {record.rollout_id!r} failed ({record.failure.kind} at turn {record.failure.turn_id}); "
            "a failed rollout has no Gym result to emit"
        )
    if not record.calls:
        raise ValueError(f"rollout {record.rollout_id!r} made no model call; there is nothing to emit")


def _usage(record: RolloutRecord) -> dict[str, int] | None:
    totals = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    seen = False
    for call in record.calls:
        usage = call.response.get("usage")
        if isinstance(usage, Mapping):
            seen = True
            for key in totals:
                value = usage.get(key)
                if isinstance(value, int):
                    totals[key] += value
    return totals if seen else None


def response_envelope(record: RolloutRecord, output: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The openai `Response` envelope of the last call, with the episode's `output` and summed usage."""
    last = record.calls[-1].response
    envelope: dict[str, Any] = {
        "id": last.get("id", f"resp_{record.rollout_id}"),
        "created_at": last.get("created_at", 0),
        "model": last.get("model", record.spec.sampling.model or "policy"),
        "object": "response",
        "status": last.get("status", "completed"),
        "incomplete_details": last.get("incomplete_details"),
        "output": [dict(item) for item in output],
        "parallel_tool_calls": last.get("parallel_tool_calls", record.spec.sampling.parallel_tool_calls),
        "tool_choice": last.get("tool_choice", record.spec.sampling.tool_choice),
        "tools": list(last.get("tools") or []),
    }
    usage = _usage(record)
    if usage is not None:
        envelope["usage"] = usage
    return envelope


def contract_identity(record: RolloutRecord) -> dict[str, Any]:
    """The identity fields `/run` stamps on the contract."""
    spec = record.spec
    return {
        "rollout_id": spec.rollout_id,
        "group_id": spec.group_id,
        "task_id": spec.task_id,
        "rollout_index": spec.rollout_index,
        "attempt_index": spec.attempt_index,
    }


def _lineage_fields(record: RolloutRecord, include_lineage: bool) -> dict[str, Any]:
    if not include_lineage:
        return {}
    decision = record.final_policy_decision
    return {
        "final_policy_decision": decision.to_json() if decision is not None else None,
        "lineage_deltas": [d.to_json() for d in record.lineage_deltas],
    }


def _evidence_tail(record: RolloutRecord) -> dict[str, Any]:
    return {
        "chunk_records": [c.to_json() for c in record.chunk_records],
        "boundary_events": [b.to_json() for b in record.boundary_events],
        "guard_records": [],
    }


def emit_full(record: RolloutRecord, *, include_lineage: bool = True) -> dict[str, Any]:
    """`ContextCompactedResponse` (schema 2): the validation envelope with the token arrays inline."""
    _require_calls(record)
    out = response_envelope(record, list(record.output_items))
    out["agent_input"] = [dict(it) for it in record.agent_input]
    out["seed_obs"] = []
    out["media_assets"] = {k: dict(v) for k, v in record.media_assets.items()}
    out["completion_evidence"] = [c.observed.to_json() for c in record.calls]
    out.update(_lineage_fields(record, include_lineage))
    out.update(_evidence_tail(record))
    out["context_compaction_contract"] = {
        "schema_version": 2,
        "mode": "exact_trace_authority",
        **contract_identity(record),
        "generation_contract": record.generation_contract.to_json(),
    }
    return out


def _transport(record: RolloutRecord, *, include_lineage: bool) -> dict[str, Any]:
    _require_calls(record)
    out = response_envelope(record, [without_image_parts(it) for it in record.output_items])
    out["media_assets"] = {k: dict(v) for k, v in record.media_assets.items()}
    out["model_call_metadata"] = [c.observed.metadata_json() for c in record.calls]
    out.update(_lineage_fields(record, include_lineage))
    out.update(_evidence_tail(record))
    return out


def emit_transport(record: RolloutRecord, *, include_lineage: bool = True) -> dict[str, Any]:
    """`ContextCompactedTransportResponse` (schema 3): what 0.7.0's `/run` returns after verification."""
    out = _transport(record, include_lineage=include_lineage)
    out["context_compaction_contract"] = {
        "schema_version": 3,
        "mode": "exact_trace_authority",
        **contract_identity(record),
        "generation_contract": record.generation_contract.to_json(),
    }
    return out


def emit_pr2870(record: RolloutRecord, *, include_lineage: bool = True) -> dict[str, Any]:
    """The PR #2870 transport shape: `rollout_trace_contract`, no `schema_version` or `mode`."""
    out = _transport(record, include_lineage=include_lineage)
    out["rollout_trace_contract"] = {
        **contract_identity(record),
        "generation_contract": record.generation_contract.to_json(),
    }
    return out


def emit_plain(record: RolloutRecord) -> dict[str, Any]:
    """An ordinary Gym response: the full output (token fields on each call's last item), no contract."""
    _require_calls(record)
    return response_envelope(record, list(record.output_items))


def emit_response(record: RolloutRecord, flavour: Flavour, *, include_lineage: bool = True) -> dict[str, Any]:
    """The bare response object of `record` in `flavour`."""
    if flavour == "gym-0.7.0-transport":
        return emit_transport(record, include_lineage=include_lineage)
    if flavour == "gym-0.7.0-full":
        return emit_full(record, include_lineage=include_lineage)
    if flavour == "gym-pr2870":
        return emit_pr2870(record, include_lineage=include_lineage)
    if flavour == "osworld":
        from agents.osworld import emit_osworld

        return emit_osworld(record)
    if flavour == "none":
        return emit_plain(record)
    raise ValueError(f"flavour={flavour!r}: expected one of gym-0.7.0-transport, gym-0.7.0-full, gym-pr2870, "
                     "osworld, none")


def responses_create_params(record: RolloutRecord) -> dict[str, Any]:
    """The `/run` request's `responses_create_params`: sampling fields plus the original input."""
    return {**record.spec.sampling.body(), "input": [dict(it) for it in record.agent_input]}


def emit_result(
    record: RolloutRecord,
    flavour: Flavour | None = None,
    *,
    reward: float | None = None,
    mask_sample: bool = False,
    include_lineage: bool = True,
) -> dict[str, Any]:
    """Gym's `/run` result: ``{"responses_create_params", "response", "reward"[, "instance_config"]}``."""
    result: dict[str, Any] = {
        "responses_create_params": responses_create_params(record),
        "response": emit_response(record, flavour or record.spec.flavour, include_lineage=include_lineage),
        "reward": reward,
    }
    if mask_sample:
        result["instance_config"] = {"mask_sample": True}
    return result


__all__ = [
    "contract_identity",
    "emit_full",
    "emit_plain",
    "emit_pr2870",
    "emit_response",
    "emit_result",
    "emit_transport",
    "response_envelope",
    "responses_create_params",
]
