"""Gym's canonical digests and stable ids, re-implemented from the documented algorithm."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any


def canonical_json(value: Any) -> str:
    """Gym's canonical JSON: sorted keys, no spaces, UTF-8 kept, `repr` for unknown objects."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=repr)


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
    """The digest binding a `model_call_metadata` record to its output item's token arrays."""
    return canonical_digest(
        {
            "prompt_token_ids": list(prompt_token_ids),
            "sampled_token_ids": list(sampled_token_ids),
            "sampled_logprobs": [float(x) for x in sampled_logprobs],
        }
    )


def bytes_digest(data: bytes) -> str:
    """Plain sha256 hex of raw bytes (pixel buffers, files)."""
    return hashlib.sha256(data).hexdigest()


__all__ = [
    "bytes_digest",
    "canonical_digest",
    "canonical_json",
    "generation_evidence_digest",
    "ordered_id_digest",
    "stable_id",
]
