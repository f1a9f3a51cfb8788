"""The `Response` Gym 0.7.0's chat-completions model server returns, and how its agent sums usage.

Gym's `vllm_model_with_compaction` turns each chat completion into a `NeMoGymResponse`: it mints
``resp_``/``rs_``/``msg_`` ids with `uuid4` (a function call's item id is its ``call_id``), echoes
the request's sampling fields, and reports usage with ``input_tokens_details.cached_tokens`` and
``output_tokens_details.reasoning_tokens``. The agent's final result is the last call's envelope
with the episode's output and the usage of every call added up. Unit digests and every id built on
them hash these items, so an agent that wants Gym's evidence must hold the same shapes and ids.

Ids come from an `IdMint`. compactsim's default derives them from the completion id (deterministic,
same format); `gym-check --live` replays the ids the revision minted (`ReplayMint`), which is the
only random input of a Gym rollout, and then compares every other field exactly.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

#: `Response` fields the model server copies from the request (None when the request lacks them).
ECHOED_FIELDS: tuple[str, ...] = (
    "temperature", "top_p", "background", "max_output_tokens", "max_tool_calls", "previous_response_id", "prompt",
    "reasoning", "service_tier", "text", "top_logprobs", "truncation", "metadata", "instructions", "user",
)
#: `Response` fields Gym's dump writes as null because nothing sets them on this route.
UNSET_FIELDS: tuple[str, ...] = (
    "completed_at", "conversation", "error", "moderation", "prompt_cache_key", "prompt_cache_retention",
    "safety_identifier",
)
#: Every top-level field of the dumped `NeMoGymResponse`, in no particular order (digests sort keys).
RESPONSE_FIELDS: tuple[str, ...] = (
    "id", "created_at", "model", "object", "output", "tool_choice", "parallel_tool_calls", "tools", "status",
    "incomplete_details", "usage", *ECHOED_FIELDS, *UNSET_FIELDS,
)


class IdMint(Protocol):
    """Returns the id for the `index`-th item of kind `prefix` (``rs``, ``msg``, ``resp``) of one completion."""

    def __call__(self, prefix: str, completion_id: str, index: int) -> str: ...


def derived_id(prefix: str, completion_id: str, index: int) -> str:
    """compactsim's default: Gym's ``<prefix>_<32 hex>`` format, the hex derived from the completion id."""
    digest = hashlib.sha256(f"{prefix}/{completion_id}/{index}".encode()).hexdigest()
    return f"{prefix}_{digest[:32]}"


class ReplayMint:
    """Hands out the ids a real run minted, per prefix in order; `derived_id` once a prefix runs out.

    Built from a Gym result: its reasoning and message items' ids in output order, and its final
    response id for every ``resp`` (a result shows only the last call's).
    """

    def __init__(self, ids: Mapping[str, Iterable[str]], response_id: str | None = None) -> None:
        self._queues = {prefix: deque(values) for prefix, values in ids.items()}
        self._response_id = response_id

    @classmethod
    def from_result(cls, response: Mapping[str, Any]) -> ReplayMint:
        ids: dict[str, list[str]] = {"rs": [], "msg": []}
        for item in response.get("output") or []:
            kind = {"reasoning": "rs", "message": "msg"}.get(str(item.get("type")))
            if kind is not None and item.get("role", "assistant") == "assistant" and isinstance(item.get("id"), str):
                ids[kind].append(item["id"])
        rid = response.get("id")
        return cls(ids, rid if isinstance(rid, str) else None)

    def __call__(self, prefix: str, completion_id: str, index: int) -> str:
        if prefix == "resp" and self._response_id is not None:
            return self._response_id
        queue = self._queues.get(prefix)
        return queue.popleft() if queue else derived_id(prefix, completion_id, index)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def response_usage(usage: Any) -> dict[str, Any] | None:
    """A chat completion's `usage` as Gym's `NeMoGymResponseUsage` dump (None when the server sent none)."""
    if not isinstance(usage, Mapping):
        return None
    prompt_details = usage.get("prompt_tokens_details")
    completion_details = usage.get("completion_tokens_details")
    return {
        "input_tokens": _count(usage.get("prompt_tokens")) or 0,
        "input_tokens_details": {"cached_tokens": _count(prompt_details.get("cached_tokens"))
                                 if isinstance(prompt_details, Mapping) else None},
        "output_tokens": _count(usage.get("completion_tokens")) or 0,
        "output_tokens_details": {"reasoning_tokens": _count(completion_details.get("reasoning_tokens"))
                                  if isinstance(completion_details, Mapping) else None},
        "total_tokens": _count(usage.get("total_tokens")) or 0,
    }


def _add_optional(a: int | None, b: int | None) -> int | None:
    if a is None and b is None:
        return None
    return (a or 0) + (b or 0)


def add_usage(total: Mapping[str, Any] | None, more: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Gym's `accumulate_response_usage`: totals add, optional detail counts stay null until one is set."""
    if more is None:
        return None if total is None else dict(total)
    if total is None:
        return {k: dict(v) if isinstance(v, Mapping) else v for k, v in more.items()}
    out = {k: dict(v) if isinstance(v, Mapping) else v for k, v in total.items()}
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        out[key] = (_count(out.get(key)) or 0) + (_count(more.get(key)) or 0)
    for group, name in (("input_tokens_details", "cached_tokens"), ("output_tokens_details", "reasoning_tokens")):
        mine, theirs = out.get(group), more.get(group)
        if isinstance(mine, dict) and isinstance(theirs, Mapping):
            mine[name] = _add_optional(_count(mine.get(name)), _count(theirs.get(name)))
    return out


__all__ = [
    "ECHOED_FIELDS",
    "RESPONSE_FIELDS",
    "UNSET_FIELDS",
    "IdMint",
    "ReplayMint",
    "add_usage",
    "derived_id",
    "response_usage",
]
