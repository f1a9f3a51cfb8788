"""Emit a recorded rollout as Gym evidence in any flavour a trainer may receive, one module per flavour.

Flavours (gym-contract.md §1, §5, §8):

- ``gym-0.7.0-full`` (`gym_full`): `ContextCompactedResponse` (contract schema 2).
- ``gym-0.7.0-transport`` (`gym_transport`): `ContextCompactedTransportResponse` (schema 3).
- ``gym-pr2870`` (`pr2870`): the transport shape under `rollout_trace_contract`.
- ``osworld`` (`osworld`): OSWorld's dict emitter.
- ``none`` (`plain`): an ordinary Gym response, no contract (the legacy single-trace path).

`result.emit_result` wraps the response the way Gym's `/run` returns it to a trainer; `live`
is gym-check's live-mode emitter (it drives `CompactionSession` directly).
"""

from compactsim.agents.evidence.envelope import contract_identity, response_envelope, responses_create_params
from compactsim.agents.evidence.gym_full import emit_full
from compactsim.agents.evidence.gym_transport import emit_transport
from compactsim.agents.evidence.osworld import emit_osworld
from compactsim.agents.evidence.plain import emit_plain
from compactsim.agents.evidence.pr2870 import emit_pr2870
from compactsim.agents.evidence.result import emit_response, emit_result

__all__ = [
    "contract_identity",
    "emit_full",
    "emit_osworld",
    "emit_plain",
    "emit_pr2870",
    "emit_response",
    "emit_result",
    "emit_transport",
    "response_envelope",
    "responses_create_params",
]
