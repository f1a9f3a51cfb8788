"""The oracle's ground truth for rollouts Gym's own agent ran, from the wire log (not from Gym's payload).

The agent under test is the revision's, so there is no compactsim `RolloutRecord`. What the
oracle reads of a ground-truth log (`compactsim.harness.oracle.truth.read_truth`) is rebuilt here from the
recorded exchanges between Gym's model server and `compactsim serve`:

- a call is one successful `/v1/chat/completions` exchange of the rollout (failed attempts before
  it are its `attempts`); its prompt ids, sampled ids, logprobs and routes are what the server
  answered, its media ids the request's image parts (Gym's media id of the `input_image` part);
- the append declaration and boundary event id are the agent's own statements, read from Gym's
  result (`model_call_metadata[].expected_append_compatible` / `compaction_event_id` by turn); a
  failed rollout has none, so there a call declares append when Gym sent `required_prefix_token_ids`.

Only fields `read_truth` uses are filled; the rest of format ``compactsim.ground_truth`` v1 is
left out (this log never feeds `compactsim rollout`'s summaries).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from compactsim.agents.media.arena import media_id_for
from compactsim.harness.gym_check.wire import ROLLOUT_KEY

FORMAT = "compactsim.ground_truth"
VERSION = 1
CHAT_PATH = "/v1/chat/completions"


def rollout_exchanges(exchanges: Sequence[Mapping[str, Any]], rollout_id: str) -> list[Mapping[str, Any]]:
    """The rollout's chat exchanges in arrival order (Gym forwards our metadata key on every call)."""
    out = []
    for ex in exchanges:
        req = ex.get("request")
        if ex.get("path") == CHAT_PATH and isinstance(req, Mapping):
            if str((req.get("metadata") or {}).get(ROLLOUT_KEY)) == rollout_id:
                out.append(ex)
    return out


def _image_parts(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every image of the request as Gym's Responses `input_image` part, in message order."""
    parts = []
    for msg in request.get("messages") or []:
        content = msg.get("content") if isinstance(msg, Mapping) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "image_url":
                image = part.get("image_url") or {}
                parts.append({"type": "input_image", "image_url": image.get("url"), "detail": image.get("detail", "auto")})
    return parts


def _message_items(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The answer as Responses output items (only the final message text matters to the oracle)."""
    items: list[dict[str, Any]] = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        items.append({"type": "function_call", "call_id": call.get("id"), "name": fn.get("name"),
                      "arguments": fn.get("arguments")})
    text = message.get("content")
    if isinstance(text, str) and text:
        items.append({"type": "message", "role": "assistant",
                      "content": [{"type": "output_text", "text": text, "annotations": []}]})
    return items


def _declarations(result: Mapping[str, Any] | None) -> dict[int, tuple[bool, str | None]]:
    """turn id → (expected_append_compatible, compaction_event_id) as Gym's agent declared them."""
    response = (result or {}).get("response") or {}
    records = response.get("model_call_metadata") or response.get("completion_evidence") or []
    return {int(r["turn_id"]): (bool(r["expected_append_compatible"]), r.get("compaction_event_id"))
            for r in records if isinstance(r, Mapping) and isinstance(r.get("turn_id"), int)}


def gym_ground_truth(
    spec: Any,
    exchanges: Sequence[Mapping[str, Any]],
    result: Mapping[str, Any] | None,
    *,
    failure: str | None = None,
) -> dict[str, Any]:
    """The ground-truth log of `spec`'s rollout as Gym's agent ran it (see the module doc)."""
    mine = rollout_exchanges(exchanges, spec.rollout_id)
    declared = _declarations(result)
    calls: list[dict[str, Any]] = []
    media: dict[str, dict[str, Any]] = {}
    attempts: list[dict[str, Any]] = []
    for ex in mine:
        attempts.append({"status": ex.get("status")})
        if ex.get("status") != 200 or not isinstance(ex.get("response"), Mapping):
            continue
        req, res = ex["request"], ex["response"]
        choice = res["choices"][0]
        logprobs = [float(c["logprob"]) for c in (choice.get("logprobs") or {}).get("content") or []]
        turn = len(calls) + 1
        parts = _image_parts(req)
        ids = [media_id_for(p) for p in parts]
        for mid, part in zip(ids, parts, strict=True):
            media.setdefault(mid, {"data_url": part["image_url"], "first_shown_turn": turn})
        message = choice.get("message") or {}
        calls.append({
            "turn_id": turn,
            "attempts": attempts,
            "ids": {"compaction_event_id": declared[turn][1] if turn in declared else None},
            "sent": {"media_ids": ids, "required_prefix_token_count": (
                len(req["required_prefix_token_ids"]) if isinstance(req.get("required_prefix_token_ids"), list) else None),
                "metadata": dict(req.get("metadata") or {})},
            "received": {
                "response_id": res.get("id"),
                "policy_version": res.get("policy_version"),
                "finish_reason": "max_output_tokens" if choice.get("finish_reason") == "length" else None,
                "prompt_token_ids": list(res.get("prompt_token_ids") or []),
                "generation_token_ids": list(choice.get("token_ids") or []),
                "generation_log_probs": logprobs,
                "routed_experts": message.get("routed_experts"),
                "output_items": _message_items(message),
            },
            "compaction": {"declared_append_compatible": declared[turn][0] if turn in declared
                           else isinstance(req.get("required_prefix_token_ids"), list)},
        })
        attempts = []
    reward = (result or {}).get("reward")
    instance = (result or {}).get("instance_config") or {}
    return {
        "format": FORMAT,
        "version": VERSION,
        "source": "gym-wire-log",
        "rollout": {
            "rollout_id": spec.rollout_id, "group_id": spec.group_id, "task_id": spec.task_id,
            "rollout_index": spec.rollout_index, "attempt_index": spec.attempt_index, "seed": spec.seed,
            "flavour": "gym-0.7.0-transport", "sends_required_prefix": True,
            "context_history": spec.context_history.model_dump(mode="json"), "max_steps": spec.max_steps,
        },
        "outcome": {
            "status": "completed" if result is not None else "failed",
            "failure": None if failure is None else {"kind": "gym_run_failed", "detail": failure},
            "num_calls": len(calls),
            "reward": float(reward) if isinstance(reward, (int, float)) else None,
            "mask_sample": bool(instance.get("mask_sample", False)),
        },
        "media": media,
        "calls": calls,
    }


__all__ = ["CHAT_PATH", "gym_ground_truth", "rollout_exchanges"]
