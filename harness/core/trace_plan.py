"""The logical → physical trace plan: plain data produced by the planner and by the oracle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from compactsim.harness.core.evidence import RolloutEvidence

StartReason = Literal["rollout_start", "declared_boundary", "inferred_discontinuity"]
PlanPath = Literal["single", "physical"]


def physical_trace_id(rollout_id: str, trace_index: int) -> str:
    """Readable, deterministic physical trace id: `<rollout_id>/trace-<k>`."""
    return f"{rollout_id}/trace-{trace_index}"


@dataclass(frozen=True, slots=True)
class PhysicalTrace:
    """A maximal run of append-compatible calls; becomes one training row."""

    trace_id: str
    trace_index: int
    #: Indices into `RolloutEvidence.calls`.
    call_indices: tuple[int, ...]
    turn_ids: tuple[int, ...]
    #: Media of the row = the media of the trace's last prompt (all of them, re-owned at a boundary).
    media_ids: tuple[str, ...]
    start_reason: StartReason
    #: Row length: last prompt + its sampled ids.
    num_tokens: int
    #: Trainable tokens: sampled ids of every call in the trace.
    num_sampled_tokens: int

    def to_json(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "turn_ids": list(self.turn_ids),
            "media_ids": list(self.media_ids),
            "start_reason": self.start_reason,
            "num_tokens": self.num_tokens,
            "num_sampled_tokens": self.num_sampled_tokens,
        }


@dataclass(frozen=True, slots=True)
class Violation:
    """One contract violation found by a non-strict plan."""

    code: str
    turn_id: int | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "turn_id": self.turn_id, "detail": self.detail}


@dataclass(frozen=True, slots=True, eq=False)
class TracePlan:
    """How one logical rollout splits into physical traces."""

    rollout_id: str
    path: PlanPath
    traces: tuple[PhysicalTrace, ...]
    evidence: RolloutEvidence
    violations: tuple[Violation, ...] = field(default=())

    @property
    def trainable(self) -> bool:
        """A plan with violations (non-strict mode) is for diagnosis only, never for training."""
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {
            "rollout_id": self.rollout_id,
            "path": self.path,
            "physical_traces": [t.to_json() for t in self.traces],
            "violations": [v.to_json() for v in self.violations],
        }


__all__ = ["PhysicalTrace", "PlanPath", "StartReason", "TracePlan", "Violation", "physical_trace_id"]
