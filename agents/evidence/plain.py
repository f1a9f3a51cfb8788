"""``none``: an ordinary Gym response with no contract (the legacy single-trace path)."""

from __future__ import annotations

from typing import Any

from compactsim.agents.evidence.envelope import require_calls, response_envelope
from compactsim.agents.rollout.record import RolloutRecord


def emit_plain(record: RolloutRecord) -> dict[str, Any]:
    """An ordinary Gym response: the full output (token fields on each call's last item), no contract."""
    require_calls(record)
    return response_envelope(record, list(record.output_items))
