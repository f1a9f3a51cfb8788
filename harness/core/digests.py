"""Gym's canonical digests and stable ids, re-implemented from the documented algorithm."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from harness.core.errors import ContractError

#: Deepest container nesting an untrusted value may have before it is digested. Gym's parts are
#: 2-3 levels deep; the cap turns a hostile 100k-deep value into a typed error up front.
MAX_DIGEST_DEPTH: int = 64


def nesting_depth(value: Any, limit: int = MAX_DIGEST_DEPTH) -> int:
    """Container depth of a JSON-like value (a scalar is 0), counted without recursion; stops past `limit`."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        stack.extend((child, depth) for child in children if isinstance(child, (dict, list, tuple)))
    return deepest


def canonical_json(value: Any) -> str:
    """Gym's canonical JSON: sorted keys, no spaces, UTF-8 kept, `repr` for unknown objects.

    A value nested past the interpreter's recursion limit is refused with
    `ContractError("malformed_payload")` instead of escaping as a `RecursionError`; callers that
    digest untrusted values bound their depth first with `nesting_depth`.
    """
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)
    except RecursionError:
        raise ContractError("malformed_payload", detail="a digested value nests too deeply to encode") from None


def canonical_digest(value: Any) -> str:
    """`sha256(canonical_json(value))` as hex, exactly as Gym's `history.canonical_digest`."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def stable_id(prefix: str, *parts: Any) -> str:
    """`f"{prefix}-{canonical_digest(list(parts))[:24]}"`; the prefix itself is not hashed."""
    return f"{prefix}-{canonical_digest(list(parts))[:24]}"


def ordered_id_digest(ids: Iterable[str]) -> str:
    """Gym's `_ordered_id_digest`: sha256 of the ids joined by the unit separator."""
    return hashlib.sha256("\x1f".join(ids).encode("utf-8")).hexdigest()


def generation_evidence_digest(
    prompt_token_ids: Iterable[int], sampled_token_ids: Iterable[int], sampled_logprobs: Iterable[float]
) -> str:
    """The digest binding a `model_call_metadata` record to its output item's token arrays.

    Logprobs are hashed as floats (Gym's `repr` formatting); an integer too large for a float is
    refused with `ContractError("malformed_payload")`, never an `OverflowError`.
    """
    return canonical_digest(
        {
            "prompt_token_ids": list(prompt_token_ids),
            "sampled_token_ids": list(sampled_token_ids),
            "sampled_logprobs": [_as_float(x, j) for j, x in enumerate(sampled_logprobs)],
        }
    )


def _as_float(x: float, index: int) -> float:
    try:
        return float(x)
    except OverflowError:
        raise ContractError(
            "malformed_payload", detail=f"sampled_logprobs[{index}] is an integer too large for a float"
        ) from None


def bytes_digest(data: bytes) -> str:
    """Plain sha256 hex of raw bytes (pixel buffers, files)."""
    return hashlib.sha256(data).hexdigest()


__all__ = [
    "bytes_digest",
    "canonical_digest",
    "canonical_json",
    "MAX_DIGEST_DEPTH",
    "generation_evidence_digest",
    "nesting_depth",
    "ordered_id_digest",
    "stable_id",
]
