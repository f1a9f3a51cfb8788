"""History policies: from the semantic history to a plan of kept parts, artifacts and a decision.

`IdentityPolicy` and `RecencyPolicy` reproduce Gym's `identity` (v1) and `recency` (v2) plans
part for part, including ids, digests and lineage. `SummaryPolicy`, `ToolOutputTruncationPolicy`
and `ThinkStripPolicy` are compactsim's custom policies built on the same plan shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from compactsim.agents.compaction.config import (
    POLICY_TYPES,
    HistoryPolicyConfig,
    RecencyHistoryPolicyConfig,
    SummaryPolicyConfig,
    ThinkStripConfig,
    ToolOutputTruncationConfig,
)
from compactsim.agents.compaction.history import SemanticEvent, SemanticHistory, SemanticPart, semantic_part_digest
from compactsim.agents.compaction.lineage import Disposition, PolicyDecision, build_lineage
from compactsim.harness.core.digests import canonical_digest, ordered_id_digest

EventPart = tuple[SemanticEvent, SemanticPart]
#: (disposition, output unit ids, output digests) per source part id, as `build_lineage` reads it.
_Dispositions = dict[str, tuple[Disposition, tuple[str, ...], tuple[str, ...]]]
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class KeepRef:
    """A retained part."""

    event_id: str
    part_id: str


@dataclass(frozen=True, slots=True)
class Artifact:
    """Something the view shows in place of omitted parts, anchored at the first of them.

    With `item` None it is Gym's omission marker (a text part inside a content list, or a user
    message for an item without one); otherwise `item` is inserted as a whole request item.
    """

    artifact_id: str
    anchor_part_id: str
    text: str
    source_part_ids: tuple[str, ...]
    item: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class HistoryViewPlan:
    """What one prepared view keeps, what it inserts, and the decision record."""

    keep: tuple[KeepRef, ...]
    artifacts: tuple[Artifact, ...]
    decision: PolicyDecision

    @property
    def retained_part_ids(self) -> frozenset[str]:
        return frozenset(ref.part_id for ref in self.keep)


class HistoryPolicy(Protocol):
    """Plans a view of the history for the call at `decision_turn`."""

    name: str
    version: str
    config_digest: str

    def plan(self, history: SemanticHistory, *, decision_turn: int) -> HistoryViewPlan: ...


def _consecutive_runs(items: Iterable[_T], selected: Callable[[_T], bool]) -> list[list[_T]]:
    """The maximal runs of consecutive selected items, in order."""
    runs: list[list[_T]] = []
    current: list[_T] = []
    for item in items:
        if selected(item):
            current.append(item)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def _omitted_runs(parts: Sequence[EventPart], omitted: set[str]) -> tuple[tuple[str, str], ...]:
    """`changed_part_ranges`: (first, last) of each run of consecutive omitted parts."""
    ids = (part.part_id for _, part in parts)
    return tuple((run[0], run[-1]) for run in _consecutive_runs(ids, omitted.__contains__))


def _kept(event: SemanticEvent, part: SemanticPart) -> tuple[Disposition, tuple[str, ...], tuple[str, ...]]:
    return ("kept", (part.part_id,), (semantic_part_digest(event, part),))


def _keep_all_but(parts: Sequence[EventPart], excluded: Iterable[str]) -> tuple[list[KeepRef], _Dispositions]:
    """Every part not in `excluded`, in history order, with its `kept` disposition."""
    skip = set(excluded)
    kept = [(e, p) for e, p in parts if p.part_id not in skip]
    return [KeepRef(e.event_id, p.part_id) for e, p in kept], {p.part_id: _kept(e, p) for e, p in kept}


def _view_plan(
    policy: HistoryPolicy,
    history: SemanticHistory,
    *,
    decision_turn: int,
    keep: Sequence[KeepRef],
    omitted: Sequence[str],
    protected: Iterable[str],
    artifacts: Sequence[Artifact],
    dispositions: _Dispositions,
) -> HistoryViewPlan:
    """The plan and decision record shared by every selecting policy (recency's formulas).

    `IdentityPolicy` builds its own record: Gym's identity `selection_digest` has no omitted section.
    """
    retained = tuple(ref.part_id for ref in keep)
    decision = PolicyDecision(
        policy_name=policy.name,
        policy_version=policy.version,
        config_digest=policy.config_digest,
        protected_part_ids=tuple(protected),
        changed_part_ranges=_omitted_runs(history.parts, set(omitted)),
        retained_part_count=len(retained),
        omitted_part_count=len(omitted),
        selection_digest=ordered_id_digest((*retained, "--omitted--", *omitted)),
        inserted_artifact_ids=tuple(a.artifact_id for a in artifacts),
        decision_turn=decision_turn,
        lineage=build_lineage(
            history,
            transformation_type=policy.name,
            transformation_version=policy.version,
            configuration_digest=policy.config_digest,
            dispositions=dispositions,
            lossy=bool(omitted),
        ),
    )
    return HistoryViewPlan(keep=tuple(keep), artifacts=tuple(artifacts), decision=decision)


def _reasoning_turns(parts: Sequence[EventPart]) -> list[int]:
    """Turns that produced reasoning, in order (one reasoning block per model call)."""
    turns: list[int] = []
    for event, part in parts:
        if part.kind == "reasoning" and event.turn_id not in turns:
            turns.append(event.turn_id)
    return turns


class _ConfiguredPolicy:
    """A policy with a config model; its digest is Gym's ``{"type": name, "config": dump}``."""

    name: str
    version: str

    def __init__(self, config: BaseModel) -> None:
        self.config = config
        self.config_digest = canonical_digest({"type": self.name, "config": config.model_dump(mode="json")})


class IdentityPolicy:
    """Keep every part: lossless, every view extends the last, no boundary ever."""

    name = "identity"
    version = "1"

    def __init__(self) -> None:
        self.config_digest = canonical_digest({"type": self.name})

    def plan(self, history: SemanticHistory, *, decision_turn: int) -> HistoryViewPlan:
        keep, dispositions = _keep_all_but(history.parts, ())
        retained = tuple(ref.part_id for ref in keep)
        decision = PolicyDecision(
            policy_name=self.name,
            policy_version=self.version,
            config_digest=self.config_digest,
            protected_part_ids=(),
            changed_part_ranges=(),
            retained_part_count=len(retained),
            omitted_part_count=0,
            selection_digest=ordered_id_digest(retained),
            inserted_artifact_ids=(),
            decision_turn=decision_turn,
            lineage=build_lineage(
                history,
                transformation_type="identity",
                transformation_version=self.version,
                configuration_digest=self.config_digest,
                dispositions=dispositions,
                lossy=False,
            ),
        )
        return HistoryViewPlan(keep=tuple(keep), artifacts=(), decision=decision)


class RecencyPolicy(_ConfiguredPolicy):
    """Gym's recency policy: last K image groups and last K reasoning blocks."""

    name = "recency"
    version = "2"

    config: RecencyHistoryPolicyConfig

    def _image_groups(self, parts: Sequence[EventPart]) -> list[tuple[str, list[EventPart]]]:
        groups: dict[str, list[EventPart]] = {}
        for event, part in parts:
            if part.kind == "image":
                assert part.observation_group_id is not None
                groups.setdefault(part.observation_group_id, []).append((event, part))
        return list(groups.items())

    def plan(self, history: SemanticHistory, *, decision_turn: int) -> HistoryViewPlan:
        cfg = self.config
        parts = history.parts
        groups = self._image_groups(parts)

        # images: protected (initial context) | last K others | pending (conditions this call)
        protected_groups: set[str] = set()
        pending_groups: set[str] = set()
        retained_groups = {gid for gid, _ in groups}
        if cfg.images.enabled:
            protected_groups = {
                gid
                for gid, members in groups
                if cfg.images.protect_initial_context and any(e.is_initial_context for e, _ in members)
            }
            pending_groups = {
                gid for gid, members in groups if any(e.conditions_action_turn == decision_turn for e, _ in members)
            }
            candidates = [gid for gid, _ in groups if gid not in protected_groups]
            k = cfg.images.keep_last_groups
            recent = set(candidates[-k:] if k else [])
            retained_groups = protected_groups | recent | pending_groups

        # reasoning: one block per turn; optional first block plus last K
        turns = _reasoning_turns(parts)
        protected_turns: set[int] = set()
        retained_turns = set(turns)
        if cfg.reasoning.enabled:
            if cfg.reasoning.keep_first_block and turns:
                protected_turns.add(turns[0])
            candidates_t = [t for t in turns if t not in protected_turns]
            k = cfg.reasoning.keep_last_blocks
            retained_turns = protected_turns | set(candidates_t[-k:] if k else [])

        keep: list[KeepRef] = []
        protected_ids: list[str] = []
        omitted: list[str] = []
        for event, part in parts:
            if part.kind == "image":
                retained = part.observation_group_id in retained_groups
                is_protected = part.observation_group_id in (protected_groups | pending_groups)
            elif part.kind == "reasoning":
                retained = event.turn_id in retained_turns
                is_protected = event.turn_id in protected_turns
            else:
                retained, is_protected = True, False
            if retained:
                keep.append(KeepRef(event.event_id, part.part_id))
                if is_protected:
                    protected_ids.append(part.part_id)
            else:
                omitted.append(part.part_id)

        # one omission marker per run of consecutive omitted image groups
        artifacts: list[Artifact] = []
        by_source: dict[str, Artifact] = {}
        marker = cfg.images.omission_marker if cfg.images.enabled else None
        if marker:
            for run in _consecutive_runs(groups, lambda group: group[0] not in retained_groups):
                sources = tuple(p.part_id for _, members in run for _, p in members)
                artifact = Artifact(
                    artifact_id=f"omission-{self.config_digest[:12]}-{sources[0]}",
                    anchor_part_id=sources[0],
                    text=marker,
                    source_part_ids=sources,
                )
                artifacts.append(artifact)
                for pid in sources:
                    by_source[pid] = artifact

        kept_ids = {ref.part_id for ref in keep}
        dispositions: _Dispositions = {}
        for event, part in parts:
            if part.part_id in kept_ids:
                dispositions[part.part_id] = _kept(event, part)
                continue
            artifact = by_source.get(part.part_id)
            if artifact is None:
                dispositions[part.part_id] = ("dropped", (), ())
            else:
                out_digest = canonical_digest(
                    {"type": "omission_marker", "artifact_id": artifact.artifact_id, "text": artifact.text}
                )
                dispositions[part.part_id] = ("replaced", (artifact.artifact_id,), (out_digest,))
        return _view_plan(
            self,
            history,
            decision_turn=decision_turn,
            keep=keep,
            omitted=omitted,
            protected=protected_ids,
            artifacts=artifacts,
            dispositions=dispositions,
        )


class SummaryPolicy(_ConfiguredPolicy):
    """Replace turns 1 .. s-1-keep_last_turns with one scripted summary message (s = last trigger)."""

    name = "summary"
    version = "1"

    config: SummaryPolicyConfig

    def summarized_turns(self, decision_turn: int) -> tuple[int, int] | None:
        """(first, last) turn the summary covers at `decision_turn`, or None before any trigger."""
        triggers = [t for t in self.config.at_turns if t <= decision_turn]
        if not triggers:
            return None
        last = triggers[-1] - 1 - self.config.keep_last_turns
        return (1, last) if last >= 1 else None

    def plan(self, history: SemanticHistory, *, decision_turn: int) -> HistoryViewPlan:
        parts = history.parts
        covered = self.summarized_turns(decision_turn)
        span = [
            (e, p)
            for e, p in parts
            if covered is not None and not e.is_initial_context and covered[0] <= e.turn_id <= covered[1]
        ]
        keep, dispositions = _keep_all_but(parts, (p.part_id for _, p in span))
        artifacts: list[Artifact] = []
        if span:
            assert covered is not None
            first, last = span[0][1].part_id, span[-1][1].part_id
            text = self.config.text.format(first_turn=covered[0], last_turn=covered[1])
            artifact = Artifact(
                artifact_id=f"summary-{self.config_digest[:12]}-{first}-{last}",
                anchor_part_id=first,
                text=text,
                source_part_ids=tuple(p.part_id for _, p in span),
                item={"type": "message", "role": "user", "content": text},
            )
            artifacts.append(artifact)
            out_digest = canonical_digest({"type": "summary", "artifact_id": artifact.artifact_id, "text": text})
            for _, p in span:
                dispositions[p.part_id] = ("summarized", (artifact.artifact_id,), (out_digest,))
        return _view_plan(
            self,
            history,
            decision_turn=decision_turn,
            keep=keep,
            omitted=[p.part_id for _, p in span],
            protected=[p.part_id for e, p in parts if e.is_initial_context],
            artifacts=artifacts,
            dispositions=dispositions,
        )


class ToolOutputTruncationPolicy(_ConfiguredPolicy):
    """Older function_call outputs longer than `max_chars` are cut and marked."""

    name = "tool_output_truncation"
    version = "1"

    config: ToolOutputTruncationConfig

    def plan(self, history: SemanticHistory, *, decision_turn: int) -> HistoryViewPlan:
        cfg = self.config
        parts = history.parts
        outputs = [(e, p) for e, p in parts if e.item_type == "function_call_output"]
        k = cfg.keep_last
        recent = {p.part_id for _, p in (outputs[-k:] if k else [])}
        pending = {p.part_id for e, p in outputs if e.conditions_action_turn == decision_turn}
        truncated: dict[str, Artifact] = {}
        for event, part in outputs:
            text = event.item.get("output")
            if part.part_id in recent | pending or not isinstance(text, str) or len(text) <= cfg.max_chars:
                continue
            item = dict(event.item)
            item["output"] = text[: cfg.max_chars] + cfg.marker
            truncated[part.part_id] = Artifact(
                artifact_id=f"truncation-{self.config_digest[:12]}-{part.part_id}",
                anchor_part_id=part.part_id,
                text=item["output"],
                source_part_ids=(part.part_id,),
                item=item,
            )
        keep, dispositions = _keep_all_but(parts, truncated)
        for pid, artifact in truncated.items():
            out_digest = canonical_digest(
                {"type": "tool_output_truncation", "artifact_id": artifact.artifact_id, "item": artifact.item}
            )
            dispositions[pid] = ("transformed", (artifact.artifact_id,), (out_digest,))
        artifacts = [truncated[p.part_id] for _, p in parts if p.part_id in truncated]
        return _view_plan(
            self,
            history,
            decision_turn=decision_turn,
            keep=keep,
            omitted=[a.anchor_part_id for a in artifacts],
            protected=sorted(pending, key=[p.part_id for _, p in parts].index),
            artifacts=artifacts,
            dispositions=dispositions,
        )


class ThinkStripPolicy(_ConfiguredPolicy):
    """Reasoning of completed turns is dropped except the last `keep_last_turns` (no marker)."""

    name = "think_strip"
    version = "1"

    config: ThinkStripConfig

    def plan(self, history: SemanticHistory, *, decision_turn: int) -> HistoryViewPlan:
        parts = history.parts
        turns = _reasoning_turns(parts)
        k = self.config.keep_last_turns
        kept_turns = set(turns[-k:] if k else [])
        omitted = [p.part_id for e, p in parts if p.kind == "reasoning" and e.turn_id not in kept_turns]
        keep, dispositions = _keep_all_but(parts, omitted)
        dispositions.update((pid, ("dropped", (), ())) for pid in omitted)
        return _view_plan(
            self,
            history,
            decision_turn=decision_turn,
            keep=keep,
            omitted=omitted,
            protected=(),
            artifacts=(),
            dispositions=dispositions,
        )


_POLICIES: dict[str, tuple[type[_ConfiguredPolicy], type[BaseModel]]] = {
    "recency": (RecencyPolicy, RecencyHistoryPolicyConfig),
    "summary": (SummaryPolicy, SummaryPolicyConfig),
    "tool_output_truncation": (ToolOutputTruncationPolicy, ToolOutputTruncationConfig),
    "think_strip": (ThinkStripPolicy, ThinkStripConfig),
}


def build_policy(config: HistoryPolicyConfig) -> HistoryPolicy:
    """The policy object for a validated `HistoryPolicyConfig`."""
    if config.type == "identity":
        return IdentityPolicy()
    entry = _POLICIES.get(config.type)
    if entry is None or not isinstance(config.config, entry[1]):
        raise ValueError(f"Unknown history policy {config.type!r}; available policies: {sorted(POLICY_TYPES)}")
    return entry[0](config.config)


__all__ = [
    "Artifact",
    "HistoryPolicy",
    "HistoryViewPlan",
    "IdentityPolicy",
    "KeepRef",
    "RecencyPolicy",
    "SummaryPolicy",
    "ThinkStripPolicy",
    "ToolOutputTruncationPolicy",
    "build_policy",
]
