"""Policy decisions and transformation lineage: which part went where, with Gym's ids and digests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from compactsim.agents.compaction.history import SemanticHistory, semantic_part_digest
from compactsim.harness.core.digests import canonical_digest

Disposition = Literal["kept", "dropped", "replaced", "summarized", "transformed"]
#: (disposition, output unit ids, output digests) per source part id.
DispositionMap = Mapping[str, tuple[Disposition, tuple[str, ...], tuple[str, ...]]]


@dataclass(frozen=True, slots=True)
class UnitLineageRecord:
    """What happened to one semantic part in one view."""

    source_unit_id: str
    source_digest: str
    disposition: Disposition
    output_unit_ids: tuple[str, ...]
    output_digests: tuple[str, ...]

    def gym_repr(self) -> str:
        """The `repr()` of Gym's frozen dataclass; Gym hashes it into `transformation_id`."""
        return (
            f"UnitLineageRecord(source_unit_id={self.source_unit_id!r}, source_digest={self.source_digest!r}, "
            f"disposition={self.disposition!r}, output_unit_ids={self.output_unit_ids!r}, "
            f"output_digests={self.output_digests!r})"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "source_unit_id": self.source_unit_id,
            "source_digest": self.source_digest,
            "disposition": self.disposition,
            "output_unit_ids": list(self.output_unit_ids),
            "output_digests": list(self.output_digests),
        }


def _transformation_json(record: TransformationLineage | LineageDelta) -> dict[str, Any]:
    """The transformation fields a lineage record and its delta share, in Gym's order, with Gym's constants."""
    return {
        "transformation_type": record.transformation_type,
        "transformation_version": record.transformation_version,
        "configuration_digest": record.configuration_digest,
        "deterministic": True,
        "lossy": record.lossy,
        "generator_contract_id": None,
    }


@dataclass(frozen=True, slots=True)
class TransformationLineage:
    """Gym's `TransformationLineageRecord`: one record per semantic part of the history."""

    transformation_id: str
    transformation_type: str
    transformation_version: str
    configuration_digest: str
    lossy: bool
    unit_records: tuple[UnitLineageRecord, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "transformation_id": self.transformation_id,
            **_transformation_json(self),
            "unit_records": [u.to_json() for u in self.unit_records],
            "validator_result": "passed",
        }


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """Gym's `PolicyDecisionRecord` for one prepared view."""

    policy_name: str
    policy_version: str
    config_digest: str
    protected_part_ids: tuple[str, ...]
    changed_part_ranges: tuple[tuple[str, str], ...]
    retained_part_count: int
    omitted_part_count: int
    selection_digest: str
    inserted_artifact_ids: tuple[str, ...]
    decision_turn: int
    lineage: TransformationLineage

    def evidence_json(self) -> dict[str, Any]:
        """The bounded per-call `PolicyDecisionEvidence`."""
        return {
            "policy_name": self.policy_name,
            "policy_version": self.policy_version,
            "config_digest": self.config_digest,
            "decision_turn": self.decision_turn,
            "selection_digest": self.selection_digest,
            "transformation_id": self.lineage.transformation_id,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "policy_name": self.policy_name,
            "policy_version": self.policy_version,
            "config_digest": self.config_digest,
            "protected_part_ids": list(self.protected_part_ids),
            "changed_part_ranges": [list(r) for r in self.changed_part_ranges],
            "retained_part_count": self.retained_part_count,
            "omitted_part_count": self.omitted_part_count,
            "selection_digest": self.selection_digest,
            "inserted_artifact_ids": list(self.inserted_artifact_ids),
            "decision_turn": self.decision_turn,
            "lineage": self.lineage.to_json(),
        }

    def with_(self, **changes: Any) -> PolicyDecision:
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class LineageDelta:
    """Gym's `TransformationLineageDeltaRecord`: the unit records that changed since the last call."""

    transformation_id: str
    parent_transformation_id: str | None
    transformation_type: str
    transformation_version: str
    configuration_digest: str
    lossy: bool
    unit_upserts: tuple[UnitLineageRecord, ...]
    source_unit_count: int
    state_digest: str

    def to_json(self) -> dict[str, Any]:
        return {
            "transformation_id": self.transformation_id,
            "parent_transformation_id": self.parent_transformation_id,
            **_transformation_json(self),
            "unit_upserts": [u.to_json() for u in self.unit_upserts],
            "source_unit_count": self.source_unit_count,
            "state_digest": self.state_digest,
            "validator_result": "passed",
        }


def build_lineage(
    history: SemanticHistory,
    *,
    transformation_type: str,
    transformation_version: str,
    configuration_digest: str,
    dispositions: DispositionMap,
    lossy: bool,
) -> TransformationLineage:
    """One unit record per history part; fails loudly when a part is unaccounted for."""
    units: list[UnitLineageRecord] = []
    for event, part in history.parts:
        try:
            disposition, out_ids, out_digests = dispositions[part.part_id]
        except KeyError:
            raise ValueError(f"Lineage does not account for semantic part {part.part_id!r}") from None
        units.append(
            UnitLineageRecord(part.part_id, semantic_part_digest(event, part), disposition, out_ids, out_digests)
        )
    identity = canonical_digest(
        {
            "type": transformation_type,
            "version": transformation_version,
            "config": configuration_digest,
            "units": [u.gym_repr() for u in units],
        }
    )
    return TransformationLineage(
        transformation_id=f"transform-{identity[:24]}",
        transformation_type=transformation_type,
        transformation_version=transformation_version,
        configuration_digest=configuration_digest,
        lossy=lossy,
        unit_records=tuple(units),
    )


def lineage_state_digest(records: Sequence[UnitLineageRecord]) -> str:
    """Gym's `state_digest`: the unit records sorted by source unit id."""
    return canonical_digest([r.to_json() for r in sorted(records, key=lambda r: r.source_unit_id)])


def lineage_delta(
    lineage: TransformationLineage,
    *,
    previous: Mapping[str, UnitLineageRecord],
    parent_transformation_id: str | None,
) -> tuple[LineageDelta, dict[str, UnitLineageRecord]]:
    """The delta against the previous call's records, and the new record state."""
    current = {r.source_unit_id: r for r in lineage.unit_records}
    upserts = tuple(r for uid, r in current.items() if previous.get(uid) != r)
    delta = LineageDelta(
        transformation_id=lineage.transformation_id,
        parent_transformation_id=parent_transformation_id,
        transformation_type=lineage.transformation_type,
        transformation_version=lineage.transformation_version,
        configuration_digest=lineage.configuration_digest,
        lossy=lineage.lossy,
        unit_upserts=upserts,
        source_unit_count=len(current),
        state_digest=lineage_state_digest(list(current.values())),
    )
    return delta, current


__all__ = [
    "Disposition",
    "DispositionMap",
    "LineageDelta",
    "PolicyDecision",
    "TransformationLineage",
    "UnitLineageRecord",
    "build_lineage",
    "lineage_delta",
    "lineage_state_digest",
]
