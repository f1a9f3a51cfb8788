"""Emit a recorded rollout as Gym evidence in any flavour a trainer may receive, one module per flavour.

Flavours (gym-contract.md §1, §5, §8):

- ``gym-0.7.0-full`` (`gym_full`): `ContextCompactedResponse` (contract schema 2).
- ``gym-0.7.0-transport`` (`gym_transport`): `ContextCompactedTransportResponse` (schema 3).
- ``gym-pr2870`` (`pr2870`): the transport shape under `rollout_trace_contract`.
- ``osworld`` (`osworld`): OSWorld's dict emitter.
- ``none`` (`plain`): an ordinary Gym response, no contract (the legacy single-trace path).

Every flavour's output items are exactly Gym's: no per-item ``policy_version`` (Gym 0.7.0 drops the
server's top-level ``policy_version``, so no Gym payload carries one, and no scenario needs a
non-Gym flavour that does). The generation version a trainer needs comes from its own bookkeeping:
the collector labels each `/run` result with ``trainer_policy_version``
(`compactsim.harness.core.contract.TRAINER_POLICY_VERSION`), as NeMo-RL labels rows with its sync
step, and the ingest reads it. The ground-truth log keeps the version the server reported per call.

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
