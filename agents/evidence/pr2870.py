"""``gym-pr2870``: the transport shape under `rollout_trace_contract`, no `schema_version` or `mode`."""

from __future__ import annotations

from typing import Any

from compactsim.agents.evidence.envelope import contract_identity
from compactsim.agents.evidence.gym_transport import transport_body
from compactsim.agents.rollout.record import RolloutRecord


def emit_pr2870(record: RolloutRecord, *, include_lineage: bool = True) -> dict[str, Any]:
    """The PR #2870 transport shape: `rollout_trace_contract`, no `schema_version` or `mode`."""
    out = transport_body(record, include_lineage=include_lineage)
    out["rollout_trace_contract"] = {
        **contract_identity(record),
        "generation_contract": record.generation_contract.to_json(),
    }
    return out
