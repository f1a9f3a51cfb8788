"""``gym-0.7.0-transport``: `ContextCompactedTransportResponse` (schema 3), what 0.7.0's `/run` returns.

Image parts are removed from `output`; `model_call_metadata` binds to the output's token arrays
through `generation_evidence_digest`.
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
from compactsim.agents.items import without_image_parts
from compactsim.agents.rollout.record import RolloutRecord


def transport_body(record: RolloutRecord, *, include_lineage: bool) -> dict[str, Any]:
    """The transport projection without its contract key (shared with the PR #2870 shape)."""
    require_calls(record)
    out = response_envelope(record, [without_image_parts(it) for it in record.output_items])
    out["media_assets"] = {k: dict(v) for k, v in record.media_assets.items()}
    out["model_call_metadata"] = [c.observed.metadata_json() for c in record.calls]
    out.update(lineage_fields(record, include_lineage))
    out.update(evidence_tail(record))
    return out


def emit_transport(record: RolloutRecord, *, include_lineage: bool = True) -> dict[str, Any]:
    """`ContextCompactedTransportResponse` (schema 3): what 0.7.0's `/run` returns after verification."""
    out = transport_body(record, include_lineage=include_lineage)
    out["context_compaction_contract"] = {
        "schema_version": 3,
        "mode": "exact_trace_authority",
        **contract_identity(record),
        "generation_contract": record.generation_contract.to_json(),
    }
    return out
