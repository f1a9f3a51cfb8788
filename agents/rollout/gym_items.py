"""Responses items shaped exactly as Gym 0.7.0 validates and dumps them (its digests cover the nulls).

Gym turns every model output item and tool observation into its pydantic model and stores the
full dump: unknown keys are dropped and optional fields are written out as ``null``. View
digests, and every id built from them, hash those dumps, so an agent that wants Gym's ids must
hold the same shapes. Checked against the real 0.7.0 models through `compactsim gym-check --live`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compactsim.agents.items import TOKEN_FIELDS
from compactsim.harness.core.errors import ConfigError

_REQUIRED = object()
#: (field, default) in Gym 0.7.0's dump order; `_REQUIRED` fields are copied only when present.
_Shape = tuple[tuple[str, Any], ...]
_REASONING: _Shape = (("id", _REQUIRED), ("summary", _REQUIRED), ("type", _REQUIRED),
                      ("encrypted_content", None), ("content", None))
_FUNCTION_CALL: _Shape = (("arguments", _REQUIRED), ("call_id", _REQUIRED), ("name", _REQUIRED), ("type", _REQUIRED),
                          ("id", None), ("status", None), ("namespace", None))
_OUTPUT_MESSAGE: _Shape = (("id", _REQUIRED), ("content", _REQUIRED), ("role", _REQUIRED), ("status", _REQUIRED),
                           ("type", _REQUIRED), ("phase", None))
_FUNCTION_CALL_OUTPUT: _Shape = (("call_id", _REQUIRED), ("output", _REQUIRED), ("type", _REQUIRED),
                                 ("id", None), ("status", None))
_INPUT_MESSAGE: _Shape = (("content", _REQUIRED), ("role", _REQUIRED), ("type", "message"), ("phase", None))
_OUTPUT_TEXT: _Shape = (("annotations", _REQUIRED), ("text", _REQUIRED), ("type", _REQUIRED), ("logprobs", None))
_TRAINING_FIELDS: _Shape = (*((f, _REQUIRED) for f in TOKEN_FIELDS), ("routed_experts", None))
_OUTPUT_SHAPES: dict[str, _Shape] = {
    "reasoning": _REASONING, "function_call": _FUNCTION_CALL, "message": _OUTPUT_MESSAGE,
}


def _shaped(item: Mapping[str, Any], shape: _Shape) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, default in shape:
        if name in item:
            out[name] = item[name]
        elif default is not _REQUIRED:
            out[name] = default
    return out


def gym_output_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """One model output item as `NeMoGymResponse` validates and dumps it (training variant when it carries tokens).

    Types Gym's output union does not name here are returned as a plain copy.
    """
    shape = _OUTPUT_SHAPES.get(str(item.get("type")))
    if shape is None:
        return dict(item)
    out = _shaped(item, shape)
    if isinstance(out.get("content"), list) and item.get("type") == "message":
        out["content"] = [_shaped(p, _OUTPUT_TEXT) if isinstance(p, Mapping) and p.get("type") == "output_text"
                          else p for p in out["content"]]
    if all(f in item for f in TOKEN_FIELDS):
        out = {**_shaped(item, _TRAINING_FIELDS), **out}
    return out


def gym_observation_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """One tool observation as Gym's agent types it: function outputs and user messages are validated, others kept."""
    kind = item.get("type")
    if kind == "function_call_output":
        return _shaped(item, _FUNCTION_CALL_OUTPUT)
    if kind == "message" and item.get("role") == "user":
        return _shaped(item, _INPUT_MESSAGE)
    return dict(item)


def gym_input_items(value: Any) -> list[dict[str, Any]]:
    """The request's `input` as the agent's initial context: a string becomes one user message."""
    if isinstance(value, str):
        return [_shaped({"role": "user", "content": value}, _INPUT_MESSAGE)]
    if not isinstance(value, Sequence) or not all(isinstance(it, Mapping) for it in value):
        raise ConfigError("invalid_argument", f"live script request.input must be a string or a list of items, "
                                              f"got {type(value).__name__}")
    out: list[dict[str, Any]] = []
    for item in value:
        if item.get("role") in ("user", "system", "developer") and item.get("type", "message") == "message":
            out.append(_shaped(item, _INPUT_MESSAGE))
        else:
            out.append(gym_observation_item(item))
    return out


__all__ = ["gym_input_items", "gym_observation_item", "gym_output_item"]
