"""Turn a history plan into request items, ordered media ids and Gym's view descriptor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

from compactsim.agents.compaction.history import SemanticHistory
from compactsim.agents.compaction.lineage import PolicyDecision
from compactsim.agents.compaction.policies import Artifact, HistoryViewPlan


@dataclass(frozen=True, slots=True)
class MaterializedView:
    """The request items one call sends, the images they hold, and the part/artifact descriptor."""

    items: tuple[Mapping[str, Any], ...]
    media_ids: tuple[str, ...]
    descriptor: tuple[str, ...]
    decision: PolicyDecision


def _marker_part(source_part: Mapping[str, Any], text: str) -> dict[str, str]:
    """Gym's marker: `input_text` in place of an `input_image`, else a plain `text` part."""
    if source_part.get("type") == "input_image":
        return {"type": "input_text", "text": text}
    return {"type": "text", "text": text}


def materialize(history: SemanticHistory, plan: HistoryViewPlan) -> MaterializedView:
    """Walk the history in order, emitting retained parts and artifacts at their anchors."""
    retained = plan.retained_part_ids
    by_anchor: dict[str, Artifact] = {a.anchor_part_id: a for a in plan.artifacts}
    items: list[Mapping[str, Any]] = []
    media_ids: list[str] = []
    descriptor: list[str] = []

    for event in history.events:
        item = deepcopy(dict(event.item))
        content = item.get("content")
        # whole-item artifacts (summaries, rewritten tool outputs) come before their anchor's item
        for part in event.parts:
            artifact = by_anchor.get(part.part_id)
            if artifact is not None and artifact.item is not None:
                items.append(deepcopy(artifact.item))
                descriptor.append(f"artifact:{artifact.artifact_id}")
        if isinstance(content, list):
            new_content: list[Any] = []
            for part in event.parts:
                assert part.content_index is not None
                source = content[part.content_index]
                artifact = by_anchor.get(part.part_id)
                if artifact is not None and artifact.item is None:
                    if not isinstance(source, Mapping):
                        raise TypeError(f"Cannot anchor omission marker at non-mapping part {part.part_id}")
                    new_content.append(_marker_part(source, artifact.text))
                    descriptor.append(f"artifact:{artifact.artifact_id}")
                if part.part_id not in retained:
                    continue
                if part.kind == "image":
                    if part.media_id is None:
                        raise ValueError(f"Image part {part.part_id} has no media ID")
                    new_content.append(deepcopy(dict(history.media_arena.resolve(part.media_id))))
                    media_ids.append(part.media_id)
                else:
                    new_content.append(deepcopy(source))
                descriptor.append(f"part:{part.part_id}")
            if new_content:
                item["content"] = new_content
                items.append(item)
            continue

        part = event.parts[0]
        artifact = by_anchor.get(part.part_id)
        if artifact is not None and artifact.item is None:
            items.append({"role": event.role if event.role != "unknown" else "user", "type": "message",
                          "content": artifact.text})
            descriptor.append(f"artifact:{artifact.artifact_id}")
        if part.part_id in retained:
            items.append(item)
            descriptor.append(f"part:{part.part_id}")

    return MaterializedView(tuple(items), tuple(media_ids), tuple(descriptor), plan.decision)


def is_prefix(previous: Sequence[Any] | None, current: Sequence[Any]) -> bool:
    """True when `previous` exists and `current` starts with it (None → False: call 1)."""
    if previous is None:
        return False
    return len(current) >= len(previous) and tuple(current[: len(previous)]) == tuple(previous)


def append_compatible(
    previous_descriptor: Sequence[str] | None,
    previous_media_ids: Sequence[str] | None,
    view: MaterializedView,
) -> bool:
    """Gym's rule: the previous descriptor AND the previous ordered media ids are prefixes."""
    return is_prefix(previous_descriptor, view.descriptor) and is_prefix(previous_media_ids, view.media_ids)


__all__ = ["MaterializedView", "append_compatible", "is_prefix", "materialize"]
