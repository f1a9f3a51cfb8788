"""Planner throughput against a numpy lower bound, measured side by side in one process.

Workload (issue #2): 256 rollouts × 8 calls, prompts growing to 4,096 tokens (each call extends
the previous prompt + sampled ids; half of the rollouts are rewritten before call 5). The lower
bound does the same prefix comparisons with numpy on preloaded arrays. Ingest (pydantic
validation + digest recomputation) is reported separately: it is linear serialisation work, not
planning.

    .venv/bin/python bench/bench_planner.py [--rollouts 256] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from harness.core.seeds import rng
from harness.pipeline.ingest import ingest_result
from harness.pipeline.planner import plan_evidence
from scenarios.payloads import Call, build_response

CALLS = 8
PROMPT_MAX = 4096
SAMPLED = 64


def make_rollout(index: int) -> dict:
    g = rng(0, "bench_planner", rollout=index)
    step = (PROMPT_MAX - SAMPLED * CALLS) // CALLS
    calls: list[Call] = []
    compacted = index % 2 == 1
    for i in range(CALLS):
        sampled = g.integers(10, 500, SAMPLED).tolist()
        if i == 0 or (compacted and i == 4):
            prompt = [1000 + i] + g.integers(10, 500, step * (i + 1) - 1).tolist()
            calls.append(Call(prompt, sampled, logprobs=[-0.5] * SAMPLED, boundary=i > 0))
        else:
            prev = calls[-1]
            prompt = prev.prompt + prev.sampled + g.integers(10, 500, step).tolist()
            calls.append(Call(prompt, sampled, logprobs=[-0.5] * SAMPLED))
    return build_response(calls, rollout_id=f"r{index}")


def lower_bound(arrays: list[list[tuple[np.ndarray, np.ndarray]]]) -> int:
    splits = 0
    for calls in arrays:
        for i in range(1, len(calls)):
            context = calls[i - 1][0]
            prompt = calls[i][1]
            n = context.shape[0]
            if not (prompt.shape[0] >= n and np.array_equal(prompt[:n], context)):
                splits += 1
    return splits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    payloads = [make_rollout(i) for i in range(args.rollouts)]
    t0 = time.perf_counter()
    evidence = [ingest_result(p).evidence for p in payloads]
    ingest_s = time.perf_counter() - t0
    tokens = sum(c.num_tokens for e in evidence for c in e.calls)
    arrays = [
        [
            (np.asarray(c.prompt_token_ids + c.sampled_token_ids, dtype=np.int32), np.asarray(c.prompt_token_ids, dtype=np.int32))
            for c in e.calls
        ]
        for e in evidence
    ]

    plan_times, bound_times = [], []
    plan_evidence(evidence[0]), lower_bound(arrays[:1])  # burn-in
    for _ in range(args.repeats):
        t = time.perf_counter()
        plans = [plan_evidence(e) for e in evidence]
        plan_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        splits = lower_bound(arrays)
        bound_times.append(time.perf_counter() - t)
    assert all(p.trainable for p in plans)
    assert sum(len(p.traces) - 1 for p in plans) == splits == args.rollouts // 2

    plan_s, bound_s = statistics.median(plan_times), statistics.median(bound_times)
    print(f"workload: {args.rollouts} rollouts x {CALLS} calls, prompts up to {PROMPT_MAX} tokens, {tokens:,} tokens")
    print(f"planner (normalised evidence): {plan_s * 1e3:.1f} ms  -> {tokens / plan_s / 1e6:.1f} M tokens/s")
    print(f"numpy lower bound:            {bound_s * 1e3:.1f} ms  -> {tokens / bound_s / 1e6:.1f} M tokens/s")
    print(f"planner/bound: median {plan_s / bound_s:.2f}x (n={args.repeats}; target <= 4x)")
    print(f"ingest (validation + digests, once): {ingest_s:.2f} s -> {tokens / ingest_s / 1e6:.2f} M tokens/s")


if __name__ == "__main__":
    main()
