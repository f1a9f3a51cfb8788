"""Responses-API item dicts as Gym's agents build and strip them (messages, tool outputs, image parts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from copy import deepcopy
from typing import Any

from compactsim.harness.core.contract import TOKEN_FIELDS

_EVIDENCE_FIELDS: frozenset[str] = frozenset({*TOKEN_FIELDS, "routed_experts", "policy_version"})
#: Gym's private keys that override semantic ids; never sent to a model.
PRIVATE_ID_FIELDS: frozenset[str] = frozenset(
    {
        "_nemo_gym_event_id",
        "_nemo_gym_part_id",
        "_nemo_gym_observation_group_id",
        "_nemo_gym_media_id",
        "_nemo_gym_semantic_kind",
    }
)
#: Content-part types Gym registers in the media arena (and the transport projection drops).
IMAGE_PART_TYPES: frozenset[str] = frozenset({"image", "image_url", "input_image"})


def input_text(text: str) -> dict[str, Any]:
    """A text content part of an input message."""
    return {"type": "input_text", "text": text}


def input_image(image_url: str, *, detail: str = "auto") -> dict[str, Any]:
    """An image content part; exactly the keys Gym registers, so media ids match Gym's."""
    return {"type": "input_image", "image_url": image_url, "detail": detail}


def user_message(content: str | Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A user input message (task text, or an observation with images and text)."""
    body: Any = content if isinstance(content, str) else [dict(p) for p in content]
    return {"type": "message", "role": "user", "content": body}


def function_call_output(call_id: str, output: str) -> dict[str, Any]:
    """The observation answering one function call (text output only, as Gym's simple agent)."""
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def is_token_bearing(item: Mapping[str, Any]) -> bool:
    """True when the item carries all three token fields (Gym's evidence item)."""
    return all(k in item for k in TOKEN_FIELDS)


def is_image_part(part: Any) -> bool:
    """True for a content part Gym treats as an image."""
    return isinstance(part, Mapping) and part.get("type") in IMAGE_PART_TYPES


def strip_completion_evidence(item: Mapping[str, Any]) -> dict[str, Any]:
    """Gym's `strip_completion_evidence`: drop token fields, private ids and per-part logprobs."""
    dropped = _EVIDENCE_FIELDS | PRIVATE_ID_FIELDS
    value = deepcopy({k: v for k, v in item.items() if k not in dropped})  # never copy token arrays or routes
    content = value.get("content")
    if isinstance(content, list):
        stripped: list[Any] = []
        for part in content:
            if not isinstance(part, Mapping):
                stripped.append(deepcopy(part))
                continue
            p = dict(part)
            for key in PRIVATE_ID_FIELDS:
                p.pop(key, None)
            p.pop("logprobs", None)
            stripped.append(p)
        value["content"] = stripped
    return value


def without_image_parts(item: Mapping[str, Any]) -> dict[str, Any]:
    """Gym's transport projection of one output item: image content parts removed."""
    projected = dict(item)
    content = projected.get("content")
    if isinstance(content, list):
        projected["content"] = [p for p in content if not is_image_part(p)]
    return projected


def function_calls(items: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The function_call items of one model output, in order."""
    return [it for it in items if it.get("type") == "function_call"]


__all__ = [
    "IMAGE_PART_TYPES",
    "PRIVATE_ID_FIELDS",
    "TOKEN_FIELDS",
    "function_call_output",
    "function_calls",
    "input_image",
    "input_text",
    "is_image_part",
    "is_token_bearing",
    "strip_completion_evidence",
    "user_message",
    "without_image_parts",
]
