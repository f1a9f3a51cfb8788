"""What an agent recorded about one rollout: every call sent and received, and how the rollout ended."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from compactsim.agents.compaction.controller import ChunkRecord, RewriteBoundary
from compactsim.agents.compaction.lineage import LineageDelta, PolicyDecision
from compactsim.agents.rollout.script import RolloutSpec
from compactsim.agents.rollout.session import CompactionSession, GenerationContract, ObservedCompletion, PreparedCall

StopReason = Literal["no_tool_call", "max_steps", "length"]
FailureKind = Literal[
    "server_unavailable",  # HTTP 5xx / 429 on every attempt of the retry budget
    "timeout",  # the request timed out on every attempt
    "connection",  # the connection failed or broke on every attempt
    "malformed_response",  # the 200 body was not of the expected shape (`response_checks`) on every attempt
    "rejected_request",  # HTTP 4xx: the server refused the request (not retried)
    "evidence_violation",  # a Gym generation-time rule broke (token evidence, required prefix): not retried
]
#: Failure kinds that are retried (transient); the others end the rollout at once.
TRANSIENT_FAILURES: frozenset[str] = frozenset({"server_unavailable", "timeout", "connection", "malformed_response"})


@dataclass(frozen=True, slots=True)
class Attempt:
    """One HTTP attempt of a call: `outcome` is "ok" or a failure kind; `detail` says what happened."""

    outcome: str
    detail: str = ""

    def to_json(self) -> dict[str, str]:
        return {"outcome": self.outcome, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class RolloutFailure:
    """A classified end of a rollout that produced no usable result."""

    kind: FailureKind
    turn_id: int
    attempts: int
    detail: str
    #: every attempt of the failing request, in order
    attempt_log: tuple[Attempt, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "turn_id": self.turn_id, "attempts": self.attempts, "detail": self.detail,
                "attempt_log": [a.to_json() for a in self.attempt_log]}


@dataclass(frozen=True, slots=True, eq=False)
class ModelCallLog:
    """One answered model call: the prepared view, the body sent, the response, the evidence captured."""

    turn_id: int
    prepared: PreparedCall
    request: Mapping[str, Any]
    response: Mapping[str, Any]
    observed: ObservedCompletion
    attempts: tuple[Attempt, ...]
    #: items appended after this call (tool outputs and image messages), in order
    observations: tuple[Mapping[str, Any], ...] = ()
    #: the media ids of images first shown in `observations`, with the spec that drew them
    observation_images: tuple[tuple[str, Mapping[str, Any]], ...] = ()

    @property
    def output_items(self) -> list[Mapping[str, Any]]:
        return list(self.response.get("output") or [])

    @property
    def token_item(self) -> Mapping[str, Any]:
        return next(it for it in self.output_items if "generation_token_ids" in it)

    @property
    def policy_version(self) -> int | None:
        v = self.response.get("policy_version")
        return v if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass(frozen=True, slots=True, eq=False)
class RolloutRecord:
    """Everything the agent knows about one rollout; emitters and the ground-truth log read only this."""

    spec: RolloutSpec
    agent_input: tuple[Mapping[str, Any], ...]
    generation_contract: GenerationContract
    calls: tuple[ModelCallLog, ...]
    output_items: tuple[Mapping[str, Any], ...]
    media_assets: Mapping[str, Mapping[str, Any]]
    boundary_events: tuple[RewriteBoundary, ...]
    chunk_records: tuple[ChunkRecord, ...]
    lineage_deltas: tuple[LineageDelta, ...]
    final_policy_decision: PolicyDecision | None
    #: image specs (JSON) keyed by media id, for every image the rollout showed
    image_specs: Mapping[str, Mapping[str, Any]]
    stop_reason: StopReason | None
    failure: RolloutFailure | None = None

    @property
    def rollout_id(self) -> str:
        return self.spec.rollout_id

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def observed(self) -> list[ObservedCompletion]:
        return [c.observed for c in self.calls]


def record_from_session(
    spec: RolloutSpec,
    session: CompactionSession,
    calls: tuple[ModelCallLog, ...] | list[ModelCallLog],
    *,
    image_specs: Mapping[str, Mapping[str, Any]],
    stop_reason: StopReason | None,
    failure: RolloutFailure | None = None,
) -> RolloutRecord:
    """Freeze a finished session (call `session.finalize()` first) into a `RolloutRecord`."""
    return RolloutRecord(
        spec=spec,
        agent_input=tuple(session.initial_context),
        generation_contract=session.generation_contract,
        calls=tuple(calls),
        output_items=session.output_items,
        media_assets=session.history.media_arena.export(),
        boundary_events=session.boundary_events,
        chunk_records=session.controller.chunk_records,
        lineage_deltas=tuple(session.lineage_deltas),
        final_policy_decision=session.final_policy_decision,
        image_specs=dict(image_specs),
        stop_reason=stop_reason,
        failure=failure,
    )


__all__ = [
    "TRANSIENT_FAILURES",
    "Attempt",
    "FailureKind",
    "ModelCallLog",
    "RolloutFailure",
    "RolloutRecord",
    "StopReason",
    "record_from_session",
]
