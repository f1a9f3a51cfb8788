"""The append-only semantic history of one rollout: events, parts, ids and digests exactly as Gym's.

Every item the agent sees (task input, seed observations, each call's output, each tool
observation) is appended once as an *event*; its content parts become *parts* with stable ids
(``event-NNNNNN``, ``part-NNNNNN-CCC``). Images are factored into the media arena and replaced
in the stored item by ``{"type", "_nemo_gym_media_id"}``. Policies select parts; the
materializer turns a selection back into request items.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

from compactsim.agents.items import IMAGE_PART_TYPES, strip_completion_evidence
from compactsim.agents.media.arena import MediaArena
from compactsim.harness.core.digests import canonical_digest

#: Gym's built-in semantic part kinds (others must be registered before use).
SEMANTIC_PART_KINDS: frozenset[str] = frozenset(
    {
        "system_text",
        "task_text",
        "policy_text",
        "safety_text",
        "user_text",
        "reasoning",
        "assistant_action",
        "tool_call",
        "tool_result",
        "environment_text",
        "code",
        "file",
        "patch",
        "execution_log",
        "image",
        "video",
        "audio",
        "derived_placeholder",
        "derived_summary",
        "derived_extract",
        "derived_outline",
        "derived_diff",
    }
)


@dataclass(frozen=True, slots=True)
class SemanticPart:
    """One selectable unit: a content part, or a whole item without a content list."""

    part_id: str
    kind: str
    content_index: int | None
    observation_group_id: str | None = None
    media_id: str | None = None


@dataclass(frozen=True, slots=True)
class SemanticEvent:
    """One appended item with its parts; `turn_id` 0 is the initial context."""

    event_id: str
    turn_id: int
    role: str
    item: Mapping[str, Any]
    parts: tuple[SemanticPart, ...]
    is_initial_context: bool = False
    conditions_action_turn: int | None = None

    @property
    def item_type(self) -> str:
        return str(self.item.get("type") or "message")


def part_kind(*, role: str, item_type: str, part_type: str | None, initial: bool) -> str:
    """Gym's `_part_kind`: images, reasoning, assistant actions, environment and user text."""
    if part_type in IMAGE_PART_TYPES:
        return "image"
    if item_type == "reasoning":
        return "reasoning"
    if item_type == "function_call" or role == "assistant":
        return "assistant_action"
    if item_type == "function_call_output":
        return "environment_text"
    if role in ("system", "developer"):
        return "system_text"
    return "user_text" if initial else "environment_text"


class SemanticHistory:
    """Append-only history; the single source every request view is derived from."""

    def __init__(self, rollout_id: str) -> None:
        if not rollout_id:
            raise ValueError("rollout_id must be non-empty")
        self.rollout_id = rollout_id
        self.media_arena = MediaArena()
        self._events: list[SemanticEvent] = []
        self._event_ids: set[str] = set()

    @property
    def events(self) -> tuple[SemanticEvent, ...]:
        return tuple(self._events)

    @property
    def parts(self) -> tuple[tuple[SemanticEvent, SemanticPart], ...]:
        return tuple((event, part) for event in self._events for part in event.parts)

    def append_items(
        self,
        items: Sequence[Mapping[str, Any]] | str,
        *,
        turn_id: int,
        is_initial_context: bool = False,
        conditions_action_turn: int | None = None,
    ) -> tuple[SemanticEvent, ...]:
        """Append items as events; a bare string is one user message (Gym's input coercion)."""
        if isinstance(items, str):
            items = [{"role": "user", "type": "message", "content": items}]
        appended: list[SemanticEvent] = []
        for raw in items:
            event = self._make_event(raw, turn_id, is_initial_context, conditions_action_turn)
            self._events.append(event)
            self._event_ids.add(event.event_id)
            appended.append(event)
        return tuple(appended)

    def _make_event(
        self, raw: Mapping[str, Any], turn_id: int, initial: bool, conditions: int | None
    ) -> SemanticEvent:
        number = len(self._events)
        semantic = strip_completion_evidence(raw)
        private = dict(raw)
        event_id = private.get("_nemo_gym_event_id", f"event-{number:06d}")
        if event_id in self._event_ids:
            raise ValueError(f"Duplicate semantic event ID {event_id!r}")
        role = str(semantic.get("role") or "unknown")
        item_type = str(semantic.get("type") or "message")
        content = semantic.get("content")
        parts: list[SemanticPart] = []
        if isinstance(content, list):
            default_group = private.get("_nemo_gym_observation_group_id", f"observation-{number:06d}")
            private_content = private.get("content") or []
            for index, content_part in enumerate(content):
                private_part = private_content[index] if index < len(private_content) else {}
                if not isinstance(private_part, Mapping):
                    private_part = {}
                part_type = (
                    str(content_part.get("type"))
                    if isinstance(content_part, Mapping) and content_part.get("type") is not None
                    else None
                )
                part_id = private_part.get("_nemo_gym_part_id", f"part-{number:06d}-{index:03d}")
                kind = str(
                    private_part.get("_nemo_gym_semantic_kind")
                    or part_kind(role=role, item_type=item_type, part_type=part_type, initial=initial)
                )
                _check_kind(kind)
                group_id = media_id = None
                if kind == "image":
                    group_id = private_part.get("_nemo_gym_observation_group_id", default_group)
                    media_id = self.media_arena.register(content_part)
                    content[index] = {"type": part_type, "_nemo_gym_media_id": media_id}
                parts.append(SemanticPart(part_id, kind, index, group_id, media_id))
        else:
            part_id = private.get("_nemo_gym_part_id", f"part-{number:06d}-000")
            kind = str(
                private.get("_nemo_gym_semantic_kind")
                or part_kind(role=role, item_type=item_type, part_type=None, initial=initial)
            )
            _check_kind(kind)
            parts.append(SemanticPart(part_id, kind, None))
        return SemanticEvent(event_id, turn_id, role, semantic, tuple(parts), initial, conditions)


def _check_kind(kind: str) -> None:
    if kind not in SEMANTIC_PART_KINDS:
        raise ValueError(f"Unregistered semantic part kind {kind!r}")


def semantic_part_digest(event: SemanticEvent, part: SemanticPart) -> str:
    """Gym's unit `source_digest`: kind, stored payload, media id and observation group."""
    content = event.item.get("content")
    if isinstance(content, list):
        if part.content_index is None:
            raise ValueError(f"Semantic part {part.part_id!r} has no content index")
        payload: Any = content[part.content_index]
    else:
        payload = event.item
    return canonical_digest(
        {
            "kind": part.kind,
            "payload": payload,
            "media_id": part.media_id,
            "observation_group_id": part.observation_group_id,
        }
    )


def items_digest(items: Sequence[Mapping[str, Any]]) -> str:
    """sha256 of the canonical JSON of a list of request items."""
    return canonical_digest(list(items))


def view_digest(items: Sequence[Mapping[str, Any]], descriptor: Sequence[str], media_ids: Sequence[str]) -> str:
    """Gym's view digest: items digest, descriptor and ordered media ids."""
    return canonical_digest(
        {"items_digest": items_digest(items), "descriptor": list(descriptor), "media_ids": list(media_ids)}
    )


def copy_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy safe to hand out of the history."""
    return deepcopy(dict(item))


__all__ = [
    "SEMANTIC_PART_KINDS",
    "SemanticEvent",
    "SemanticHistory",
    "SemanticPart",
    "copy_item",
    "items_digest",
    "part_kind",
    "semantic_part_digest",
    "view_digest",
]
