"""Build `RolloutEvidence` and `TracePlan` directly from a segmentation, for materializer tests.

A rollout is described as physical segments, each a list of `(prompt_delta, sampled)` lengths:
inside a segment every call's prompt is the previous prompt + sampled ids + `prompt_delta` new
tokens; a new segment starts from a rewritten (compacted) prompt of `prompt_delta` tokens. Token
values are distinct per rollout and position, so a row can be traced back to where it came from.

Routes (when `layout=(L, K)`): call c's row t is `1000·(c+1) + 4·t + 2·l + k`, so a test can tell
which call's array a route came from; the final token's row is vLLM's placeholder `arange(K)`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from compactsim.harness.core.digests import canonical_digest
from compactsim.harness.core.evidence import MediaAsset, ModelCall, RolloutEvidence
from compactsim.harness.core.trace_plan import PhysicalTrace, TracePlan, physical_trace_id

Segment = Sequence[tuple[int, int]]


def token_base(rollout_id: str) -> int:
    return 1000 + int(canonical_digest(rollout_id)[:6], 16) % 50_000


def call_routes(call_index: int, num_tokens: int, layout: tuple[int, int], *, surplus: bool = False) -> np.ndarray:
    """vLLM-packed routes of one call: distinct per call, last valid row `arange(K)`."""
    layers, topk = layout
    rows = num_tokens + (1 if surplus else 0)
    t = np.arange(rows).reshape(rows, 1, 1)
    lk = (2 * np.arange(layers).reshape(1, layers, 1) + np.arange(topk).reshape(1, 1, topk))
    routes = (1000 * (call_index + 1) + 4 * t + lk).astype(np.int16)
    routes[num_tokens - 1] = np.arange(topk, dtype=np.int16)
    return routes


def make_rollout(
    rollout_id: str,
    segments: Sequence[Segment],
    *,
    group: str = "g0",
    reward: float | None = 1.0,
    index: int | None = None,
    mask_sample: bool = False,
    layout: tuple[int, int] | None = None,
    routed_calls: Sequence[int] | None = None,
    version: int | None = None,
    media: Sequence[Sequence[str]] | None = None,
    media_assets: dict[str, MediaAsset] | None = None,
) -> tuple[RolloutEvidence, TracePlan]:
    """Evidence plus the plan that splits it exactly at the segment starts."""
    base = token_base(rollout_id)
    counter = 0
    calls: list[ModelCall] = []
    traces: list[PhysicalTrace] = []
    for k, segment in enumerate(segments):
        indices: list[int] = []
        prompt: tuple[int, ...] = ()
        for j, (delta, sampled_len) in enumerate(segment):
            new = tuple(range(base + counter, base + counter + delta))
            counter += delta
            sampled = tuple(range(base + counter, base + counter + sampled_len))
            counter += sampled_len
            if j == 0:
                prompt = new if k == 0 else (base - 1,) + new  # a rewritten context (never a continuation)
            else:
                prev = calls[-1]
                prompt = prev.prompt_token_ids + prev.sampled_token_ids + new
            c = len(calls)
            routes = None
            if layout is not None and (routed_calls is None or c in routed_calls):
                routes = call_routes(c, len(prompt) + sampled_len, layout)
            calls.append(
                ModelCall(
                    turn_id=c + 1,
                    prompt_token_ids=prompt,
                    sampled_token_ids=sampled,
                    sampled_logprobs=tuple(-0.01 * (i + 1) - 0.001 * c for i in range(sampled_len)),
                    media_ids=tuple(media[c]) if media is not None else (),
                    routed_experts=routes,
                    expected_append_compatible=j > 0,
                    policy_version=version,
                )
            )
            indices.append(c)
        last = calls[indices[-1]]
        traces.append(
            PhysicalTrace(
                trace_id=physical_trace_id(rollout_id, k),
                trace_index=k,
                call_indices=tuple(indices),
                turn_ids=tuple(calls[i].turn_id for i in indices),
                media_ids=last.media_ids,
                start_reason="rollout_start" if k == 0 else "declared_boundary",
                num_tokens=last.num_tokens,
                num_sampled_tokens=sum(len(calls[i].sampled_token_ids) for i in indices),
            )
        )
    evidence = RolloutEvidence(
        rollout_id=rollout_id,
        flavour="gym-0.7.0-transport",
        calls=tuple(calls),
        group_id=group,
        rollout_index=index,
        media_assets=dict(media_assets or {}),
        reward=reward,
        mask_sample=mask_sample,
        contract_key="context_compaction_contract",
    )
    plan = TracePlan(
        rollout_id=rollout_id,
        path="physical" if len(traces) > 1 else "single",
        traces=tuple(traces),
        evidence=evidence,
    )
    return evidence, plan


def replan(plan: TracePlan, evidence: RolloutEvidence) -> TracePlan:
    """The same segmentation over modified evidence."""
    return TracePlan(rollout_id=evidence.rollout_id, path=plan.path, traces=plan.traces, evidence=evidence)
