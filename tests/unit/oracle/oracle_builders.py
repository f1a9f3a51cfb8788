"""Hand-sized ground truth for oracle unit tests: calls and rollouts written as plain token lists."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compactsim.harness.oracle.truth import CallTruth, RolloutTruth


def packed_routes(num_tokens: int, call: int, *, layers: int = 1, topk: int = 2, extra: int = 0) -> np.ndarray:
    """Marker routes `100*call + t + k` per token, the final row vLLM's placeholder `arange(K)`."""
    rows = np.array([[[100 * call + t + k for k in range(topk)] for _ in range(layers)] for t in range(num_tokens + extra)])
    rows[num_tokens - 1] = np.arange(topk)
    return rows.astype(np.int64)


def call(
    turn: int,
    prompt: Sequence[int],
    sampled: Sequence[int],
    *,
    append: bool | None = None,
    boundary: bool = False,
    media: Sequence[str] = (),
    logprobs: Sequence[float] | None = None,
    routes: np.ndarray | None = None,
    version: int | None = 0,
) -> CallTruth:
    """One call; by default append-compatible after the first and without a boundary."""
    return CallTruth(
        turn_id=turn,
        prompt=tuple(prompt),
        sampled=tuple(sampled),
        logprobs=tuple(logprobs) if logprobs is not None else tuple(-0.5 for _ in sampled),
        media_ids=tuple(media),
        declared_append=(turn > 1 and not boundary) if append is None else append,
        compaction_event_id=f"boundary-{turn}" if boundary else None,
        policy_version=version,
        finish_reason="stop",
        routes=routes,
        response_id=f"resp-{turn}",
    )


def continuing(prev: CallTruth, turn: int, extra: Sequence[int], sampled: Sequence[int], **kw) -> CallTruth:
    """A call whose prompt extends `prev`'s prompt + sampled ids by `extra`."""
    return call(turn, prev.context + tuple(extra), sampled, **kw)


def rollout(
    calls: Sequence[CallTruth],
    *,
    rid: str = "s0-g0-r0",
    flavour: str = "gym-0.7.0-transport",
    index: int = 0,
    media: dict[str, str] | None = None,
    group: str = "s0-g0",
) -> RolloutTruth:
    ids = {m for c in calls for m in c.media_ids}
    return RolloutTruth(
        spec_rollout_id=rid,
        group_id=group,
        task_id="task-0",
        rollout_index=index,
        flavour=flavour,
        completed=True,
        calls=tuple(calls),
        media=media if media is not None else {m: "data:image/png;base64,AAAA" for m in ids},
        logged_reward=1.0,
        logged_mask_sample=False,
        final_answer="done",
        response_id=f"resp-{rid}",
    )
