"""What every Gym evidence flavour shares: the openai `Response` envelope, `/run`'s identity stamps, lineage tails."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compactsim.agents.rollout.gym_response import RESPONSE_FIELDS, add_usage
from compactsim.agents.rollout.record import RolloutRecord
from compactsim.agents.rollout.script import task_params


def require_calls(record: RolloutRecord) -> None:
    """Refuse a rollout that failed or made no model call: it has no Gym result."""
    if record.failure is not None:
        raise ValueError(
            f"rollout {record.rollout_id!r} failed ({record.failure.kind} at turn {record.failure.turn_id}); "
            "a failed rollout has no Gym result to emit"
        )
    if not record.calls:
        raise ValueError(f"rollout {record.rollout_id!r} made no model call; there is nothing to emit")


def _usage(record: RolloutRecord) -> dict[str, Any] | None:
    """Every call's usage added up as Gym's agent does (`add_usage`); None when no call reported any."""
    total: dict[str, Any] | None = None
    for call in record.calls:
        usage = call.response.get("usage")
        if isinstance(usage, Mapping):
            total = add_usage(total, usage)
    return total


def response_envelope(record: RolloutRecord, output: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The last call's `Response` with the episode's `output` and summed usage, as Gym's agent returns it.

    Every field of Gym's dump is present (null when the model server did not set it); a
    responses-route call, whose server sets fewer, falls back to the sampling config for the rest.
    """
    last = record.calls[-1].response
    sampling = record.spec.sampling
    envelope: dict[str, Any] = {field: last.get(field) for field in RESPONSE_FIELDS}
    envelope.update({
        "id": last.get("id", f"resp_{record.rollout_id}"),
        "created_at": last.get("created_at", 0),
        "model": last.get("model", sampling.model or "policy"),
        "object": "response",
        "status": last.get("status", "completed"),
        "output": [dict(item) for item in output],
        "parallel_tool_calls": last.get("parallel_tool_calls", sampling.parallel_tool_calls),
        "tool_choice": last.get("tool_choice", sampling.tool_choice),
        "tools": list(last.get("tools") or []),
        "usage": _usage(record),
    })
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


def lineage_fields(record: RolloutRecord, include_lineage: bool) -> dict[str, Any]:
    """`final_policy_decision` and `lineage_deltas`, or nothing when lineage is left out."""
    if not include_lineage:
        return {}
    decision = record.final_policy_decision
    return {
        "final_policy_decision": decision.to_json() if decision is not None else None,
        "lineage_deltas": [d.to_json() for d in record.lineage_deltas],
    }


def evidence_tail(record: RolloutRecord) -> dict[str, Any]:
    """`chunk_records`, `boundary_events` and (always empty) `guard_records`."""
    return {
        "chunk_records": [c.to_json() for c in record.chunk_records],
        "boundary_events": [b.to_json() for b in record.boundary_events],
        "guard_records": [],
    }


def responses_create_params(record: RolloutRecord) -> dict[str, Any]:
    """The `/run` request's `responses_create_params`: sampling fields plus the original input."""
    return {**task_params(record.spec), "input": [dict(it) for it in record.agent_input]}
