"""Schedules: decide each call's view and declare a rewrite boundary where it stops extending the last.

`RollingController` re-plans at every call (Gym's `rolling_recency`); `ChunkedController`
plans a base once per chunk of K acknowledged actions and appends new parts as a tail
(Gym's `turn_chunked_recency`). Both apply Gym's append-compatibility rule (previous descriptor
AND previous media ids are prefixes) and build boundary events with Gym's ids and counts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from compactsim.agents.compaction.config import CompactionScheduleConfig
from compactsim.agents.compaction.history import SemanticHistory, semantic_part_digest, view_digest
from compactsim.agents.compaction.lineage import Disposition, build_lineage
from compactsim.agents.compaction.view import MaterializedView, append_compatible, materialize
from compactsim.agents.compaction.policies import HistoryPolicy, HistoryViewPlan, KeepRef
from compactsim.harness.core.digests import canonical_digest, ordered_id_digest


@dataclass(frozen=True, slots=True)
class RewriteBoundary:
    """Gym's `RewriteBoundaryEvent`: the view before `applies_to_step` is not extended by its view."""

    event_id: str
    trigger_after_step: int
    applies_to_step: int
    reason: str
    policy_name: str
    policy_version: str
    config_digest: str
    previous_view_digest: str
    current_view_digest: str
    changed_part_ranges: tuple[tuple[str, str], ...]
    retained_part_count: int
    omitted_part_count: int
    retained_media_count: int
    removed_media_count: int
    inserted_artifact_ids: tuple[str, ...]
    schedule_name: str = "per_action"
    schedule_version: str = "1"
    schedule_config_digest: str | None = None
    chunk_id: str | None = None
    block_index: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "trigger_after_step": self.trigger_after_step,
            "applies_to_step": self.applies_to_step,
            "reason": self.reason,
            "policy_name": self.policy_name,
            "policy_version": self.policy_version,
            "config_digest": self.config_digest,
            "previous_view_digest": self.previous_view_digest,
            "current_view_digest": self.current_view_digest,
            "changed_part_ranges": [list(r) for r in self.changed_part_ranges],
            "retained_part_count": self.retained_part_count,
            "omitted_part_count": self.omitted_part_count,
            "retained_media_count": self.retained_media_count,
            "removed_media_count": self.removed_media_count,
            "inserted_artifact_ids": list(self.inserted_artifact_ids),
            "schedule_name": self.schedule_name,
            "schedule_version": self.schedule_version,
            "schedule_config_digest": self.schedule_config_digest,
            "chunk_id": self.chunk_id,
            "block_index": self.block_index,
        }


@dataclass(frozen=True, slots=True)
class ChunkRecord:
    """Gym's `FinalizedChunkRecord` for the turn-chunked schedule."""

    chunk_id: str
    block_index: int
    eligible_action_ids: tuple[str, ...]
    completion_evidence_ids: tuple[str, ...]
    first_action_turn: int
    last_action_turn: int
    configured_actions_per_chunk: int
    policy_config_digest: str
    actual_action_count: int
    early_close_reason: str | None
    active_observation_group_count: int
    active_raw_image_count: int

    def to_json(self) -> dict[str, Any]:
        return {
            "chunk_id": self.chunk_id,
            "block_index": self.block_index,
            "eligible_action_ids": list(self.eligible_action_ids),
            "completion_evidence_ids": list(self.completion_evidence_ids),
            "first_action_turn": self.first_action_turn,
            "last_action_turn": self.last_action_turn,
            "configured_actions_per_chunk": self.configured_actions_per_chunk,
            "policy_config_digest": self.policy_config_digest,
            "actual_action_count": self.actual_action_count,
            "early_close_reason": self.early_close_reason,
            "active_observation_group_count": self.active_observation_group_count,
            "active_raw_image_count": self.active_raw_image_count,
        }


@dataclass(frozen=True, slots=True)
class PreparedView:
    """One call's view with its append verdict, boundary (if any) and segment counters."""

    view: MaterializedView
    view_digest: str
    append_compatible: bool
    boundary: RewriteBoundary | None
    context_epoch: int
    segment_index: int


class RollingController:
    """Retry-safe owner of one rollout's views and rewrite boundaries (rolling schedule)."""

    def __init__(self, history: SemanticHistory, policy: HistoryPolicy) -> None:
        self.history = history
        self.policy = policy
        self._done_descriptor: tuple[str, ...] | None = None
        self._done_media: tuple[str, ...] | None = None
        self._done_digest: str | None = None
        self._pending: RewriteBoundary | None = None
        self._boundaries: list[RewriteBoundary] = []
        self._epoch = 0
        self._segment = 0

    @property
    def boundary_events(self) -> tuple[RewriteBoundary, ...]:
        return tuple(self._boundaries)

    @property
    def chunk_records(self) -> tuple[ChunkRecord, ...]:
        return ()

    def _plan(self, *, applies_to_step: int) -> HistoryViewPlan:
        return self.policy.plan(self.history, decision_turn=applies_to_step)

    def prepare(self, *, applies_to_step: int) -> PreparedView:
        """Plan and materialize the view for `applies_to_step`; a retry returns the same boundary."""
        if applies_to_step < 1:
            raise ValueError("applies_to_step must be at least 1")
        view = materialize(self.history, self._plan(applies_to_step=applies_to_step))
        digest = view_digest(view.items, view.descriptor, view.media_ids)
        if self._pending is not None:
            if self._pending.applies_to_step != applies_to_step or self._pending.current_view_digest != digest:
                raise RuntimeError(
                    "Pending rewrite boundary changed before acknowledgement: "
                    f"pending_step={self._pending.applies_to_step} retry_step={applies_to_step}"
                )
            return PreparedView(view, digest, False, self._pending, self._epoch, self._segment)
        compatible = append_compatible(self._done_descriptor, self._done_media, view)
        boundary = None
        if self._done_descriptor is not None and not compatible:
            assert self._done_digest is not None
            boundary = self._make_boundary(applies_to_step, self._done_digest, view, digest)
            self._pending = boundary
            self._boundaries.append(boundary)
            self._epoch += 1
            self._segment += 1
        return PreparedView(view, digest, compatible, boundary, self._epoch, self._segment)

    def acknowledge(self, prepared: PreparedView, *, action_id: str, completion_id: str) -> None:
        """The call was answered: its view becomes the one the next view must extend."""
        if self._pending is not None:
            if prepared.boundary != self._pending:
                raise RuntimeError("Cannot acknowledge a different rewrite boundary")
            self._pending = None
        elif prepared.boundary is not None:
            raise RuntimeError("Prepared boundary is not pending")
        self._done_descriptor = prepared.view.descriptor
        self._done_media = prepared.view.media_ids
        self._done_digest = prepared.view_digest

    def finalize(self) -> None:
        """End of rollout (nothing to close for the rolling schedule)."""

    def _make_boundary(
        self, step: int, previous_digest: str, view: MaterializedView, current_digest: str
    ) -> RewriteBoundary:
        removed = sum((Counter(self._done_media or ()) - Counter(view.media_ids)).values())
        identity = canonical_digest(
            {
                "rollout_id": self.history.rollout_id,
                "applies_to_step": step,
                "previous_view_digest": previous_digest,
                "current_view_digest": current_digest,
            }
        )
        d = view.decision
        return RewriteBoundary(
            event_id=f"boundary-{step:06d}-{identity[:12]}",
            trigger_after_step=step - 1,
            applies_to_step=step,
            reason="history_policy_rewrite",
            policy_name=d.policy_name,
            policy_version=d.policy_version,
            config_digest=d.config_digest,
            previous_view_digest=previous_digest,
            current_view_digest=current_digest,
            changed_part_ranges=d.changed_part_ranges,
            retained_part_count=d.retained_part_count,
            omitted_part_count=d.omitted_part_count,
            retained_media_count=len(view.media_ids),
            removed_media_count=removed,
            inserted_artifact_ids=d.inserted_artifact_ids,
        )


class ChunkedController(RollingController):
    """Freeze one planned base per chunk and append a tail for up to K actions."""

    schedule_name = "turn_chunked_recency"
    schedule_version = "1"

    def __init__(self, history: SemanticHistory, policy: HistoryPolicy, *, actions_per_chunk: int) -> None:
        if actions_per_chunk < 1:
            raise ValueError("actions_per_chunk must be at least 1")
        super().__init__(history, policy)
        self.actions_per_chunk = actions_per_chunk
        self.schedule_config_digest = canonical_digest(
            {"schedule": self.schedule_name, "version": self.schedule_version, "actions_per_chunk": actions_per_chunk}
        )
        self._base: HistoryViewPlan | None = None
        self._base_part_ids: frozenset[str] = frozenset()
        self._needs_chunk = True
        self._block = -1
        self._chunk_id: str | None = None
        self._actions: list[tuple[str, int, str]] = []  # (action_id, turn, completion_id)
        self._last_ack: PreparedView | None = None
        self._chunks: list[ChunkRecord] = []

    @property
    def chunk_records(self) -> tuple[ChunkRecord, ...]:
        return tuple(self._chunks)

    @property
    def current_chunk_id(self) -> str | None:
        return self._chunk_id

    def _start_chunk(self, step: int) -> None:
        self._block += 1
        identity = canonical_digest(
            {
                "rollout_id": self.history.rollout_id,
                "block_index": self._block,
                "schedule_config_digest": self.schedule_config_digest,
            }
        )
        self._chunk_id = f"chunk-{self._block:06d}-{identity[:12]}"
        self._base = self.policy.plan(self.history, decision_turn=step)
        self._base_part_ids = frozenset(p.part_id for _, p in self.history.parts)
        self._actions = []
        self._last_ack = None
        self._needs_chunk = False

    def _plan(self, *, applies_to_step: int) -> HistoryViewPlan:
        if self._needs_chunk:
            self._start_chunk(applies_to_step)
        assert self._base is not None
        parts = self.history.parts
        tail = tuple(KeepRef(e.event_id, p.part_id) for e, p in parts if p.part_id not in self._base_part_ids)
        keep = (*self._base.keep, *tail)
        base = self._base.decision
        dispositions: dict[str, tuple[Disposition, tuple[str, ...], tuple[str, ...]]] = {
            u.source_unit_id: (u.disposition, u.output_unit_ids, u.output_digests) for u in base.lineage.unit_records
        }
        tail_ids = {ref.part_id for ref in tail}
        for event, part in parts:
            if part.part_id in tail_ids:
                dispositions[part.part_id] = ("kept", (part.part_id,), (semantic_part_digest(event, part),))
        retained = tuple(ref.part_id for ref in keep)
        decision = replace(
            base,
            retained_part_count=len(retained),
            selection_digest=ordered_id_digest((*retained, "--base-selection--", base.selection_digest)),
            decision_turn=applies_to_step,
            lineage=build_lineage(
                self.history,
                transformation_type=base.lineage.transformation_type,
                transformation_version=base.lineage.transformation_version,
                configuration_digest=base.lineage.configuration_digest,
                dispositions=dispositions,
                lossy=base.lineage.lossy,
            ),
        )
        return HistoryViewPlan(keep=keep, artifacts=self._base.artifacts, decision=decision)

    def acknowledge(self, prepared: PreparedView, *, action_id: str, completion_id: str) -> None:
        super().acknowledge(prepared, action_id=action_id, completion_id=completion_id)
        self._last_ack = prepared
        self._actions.append((action_id, prepared.view.decision.decision_turn, completion_id))
        if len(self._actions) == self.actions_per_chunk:
            self._finalize_chunk(None)
            self._needs_chunk = True

    def finalize(self) -> None:
        """Close a partly filled chunk with reason `terminal`."""
        if self._actions:
            self._finalize_chunk("terminal")
            self._needs_chunk = True

    def _finalize_chunk(self, early_close_reason: str | None) -> None:
        if self._chunk_id is None or self._last_ack is None or not self._actions:
            raise RuntimeError("Cannot finalize a chunk without a prepared action")
        view = self._last_ack.view
        kept = {d.removeprefix("part:") for d in view.descriptor if d.startswith("part:")}
        groups = {p.observation_group_id for _, p in self.history.parts if p.kind == "image" and p.part_id in kept}
        self._chunks.append(
            ChunkRecord(
                chunk_id=self._chunk_id,
                block_index=self._block,
                eligible_action_ids=tuple(a for a, _, _ in self._actions),
                completion_evidence_ids=tuple(c for _, _, c in self._actions),
                first_action_turn=self._actions[0][1],
                last_action_turn=self._actions[-1][1],
                configured_actions_per_chunk=self.actions_per_chunk,
                policy_config_digest=view.decision.config_digest,
                actual_action_count=len(self._actions),
                early_close_reason=early_close_reason,
                active_observation_group_count=len(groups),
                active_raw_image_count=len(view.media_ids),
            )
        )
        self._actions = []
        self._last_ack = None

    def _make_boundary(
        self, step: int, previous_digest: str, view: MaterializedView, current_digest: str
    ) -> RewriteBoundary:
        boundary = super()._make_boundary(step, previous_digest, view, current_digest)
        return replace(
            boundary,
            schedule_name=self.schedule_name,
            schedule_version=self.schedule_version,
            schedule_config_digest=self.schedule_config_digest,
            chunk_id=self._chunk_id,
            block_index=self._block,
        )


def build_controller(
    history: SemanticHistory, policy: HistoryPolicy, schedule: CompactionScheduleConfig
) -> RollingController:
    """The controller for a schedule config."""
    if schedule.type == "turn_chunked_recency":
        return ChunkedController(history, policy, actions_per_chunk=schedule.actions_per_chunk)
    return RollingController(history, policy)


__all__ = [
    "ChunkRecord",
    "ChunkedController",
    "PreparedView",
    "RewriteBoundary",
    "RollingController",
    "build_controller",
]
