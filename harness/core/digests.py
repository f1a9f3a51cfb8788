"""Gym's canonical digests and stable ids, re-implemented from the documented algorithm."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

from compactsim.harness.core.errors import ContractError

#: Gym's content-addressed media id: "media-" + the first 24 hex digits of the content digest
#: (gym-contract §2.4). Only this form claims its content (digest, id and dimensions can be checked);
#: any other id is opaque.
GYM_MEDIA_ID = re.compile(r"media-[0-9a-f]{24}")

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


class EvidenceDigestChain:
    """`generation_evidence_digest` for the calls of one rollout in order, in time linear in new tokens.

    Call i+1's prompt usually extends call i's prompt + sampled ids, and the digest's canonical
    JSON starts with the prompt (``{"prompt_token_ids":[...``, keys sorted), so the SHA-256 state
    after the previous context is copied and only the new ids are encoded. A prompt that does not
    extend the previous context is hashed from scratch. Bytes hashed are exactly
    `canonical_json`'s, so every digest equals `generation_evidence_digest`: the ids are
    JSON-encoded element by element as `canonical_json` does (an element's text does not depend
    on its neighbours); logprobs go through `float` first, as in `generation_evidence_digest`.
    """

    __slots__ = ("_head", "_tail", "_state", "extended")

    def __init__(self) -> None:
        self._head: Sequence[int] = ()
        self._tail: Sequence[int] = ()
        self._state: Any = None  # sha256 after '{"prompt_token_ids":[' + head + tail ids
        #: Whether the last `digest` call's prompt extended the previous call's prompt + sampled ids.
        self.extended = False

    def digest(self, prompt: Sequence[int], sampled: Sequence[int], logprobs: Iterable[float]) -> str:
        head, tail = self._head, self._tail
        n_head = len(head)
        n = n_head + len(tail)
        self.extended = self._state is not None and len(prompt) >= n and prompt[n_head:n] == tail and prompt[:n_head] == head
        if self.extended:
            state = self._state.copy()
            state.update(_items_json(prompt[n:], comma=n > 0))
        else:
            state = hashlib.sha256(b'{"prompt_token_ids":[')
            state.update(_items_json(prompt, comma=False))
        final = state.copy()
        sampled_json = _items_json(sampled, comma=False)
        lps = _items_json([_as_float(x, j) for j, x in enumerate(logprobs)], comma=False)
        final.update(b'],"sampled_logprobs":[' + lps + b'],"sampled_token_ids":[' + sampled_json + b"]}")
        if sampled_json:
            state.update(b"," + sampled_json if len(prompt) else sampled_json)
        self._head, self._tail, self._state = prompt, sampled, state
        return final.hexdigest()


def _items_json(items: Sequence[Any], *, comma: bool) -> bytes:
    """`canonical_json(list(items))` without its brackets, led by a comma when it continues a non-empty list."""
    if not items:
        return b""
    text = canonical_json(list(items) if not isinstance(items, list) else items)[1:-1].encode("utf-8")
    return b"," + text if comma else text


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
    "GYM_MEDIA_ID",
    "EvidenceDigestChain",
    "bytes_digest",
    "canonical_digest",
    "canonical_json",
    "MAX_DIGEST_DEPTH",
    "generation_evidence_digest",
    "nesting_depth",
    "ordered_id_digest",
    "stable_id",
]
