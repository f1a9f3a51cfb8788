"""``gym-0.7.0-full``: `ContextCompactedResponse` (contract schema 2), the validation envelope.

It keeps `agent_input`, `seed_obs`, `completion_evidence` with the token arrays, and images in `output`.
"""

from __future__ import annotations

from typing import Any

from compactsim.agents.evidence.envelope import (
    contract_identity,
    evidence_tail,
    lineage_fields,
    require_calls,
    response_envelope,
)
from compactsim.agents.rollout.record import RolloutRecord


def emit_full(record: RolloutRecord, *, include_lineage: bool = True) -> dict[str, Any]:
    """`ContextCompactedResponse` (schema 2): the validation envelope with the token arrays inline."""
    require_calls(record)
    out = response_envelope(record, list(record.output_items))
    out["agent_input"] = [dict(it) for it in record.agent_input]
    out["seed_obs"] = []
    out["media_assets"] = {k: dict(v) for k, v in record.media_assets.items()}
    out["completion_evidence"] = [c.observed.to_json() for c in record.calls]
    out.update(lineage_fields(record, include_lineage))
    out.update(evidence_tail(record))
    out["context_compaction_contract"] = {
        "schema_version": 2,
        "mode": "exact_trace_authority",
        **contract_identity(record),
        "generation_contract": record.generation_contract.to_json(),
    }
    return out
