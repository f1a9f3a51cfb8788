"""Planner throughput against a numpy lower bound, measured side by side in one process.

Workload (issue #2): 256 rollouts × 8 calls, prompts growing to 4,096 tokens (each call extends
the previous prompt + sampled ids; half of the rollouts are rewritten before call 5). The lower
bound does the same prefix comparisons with numpy on preloaded arrays.

Ingest (pydantic validation + digest recomputation, `ingest_result` on the decoded payloads) is
measured against its own bound, side by side: `json.loads` of the same payloads' JSON text plus
SHA-256 of the canonical bytes of every call's evidence digest (the parse any consumer does and
the hashing the contract requires, with no validation and no object building).

    .venv/bin/python bench/bench_planner.py [--rollouts 256] [--repeats 5]

Figures also go to `bench/results/planner.json`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import Metric, write_result
from compactsim.harness.core.digests import canonical_json
from compactsim.harness.core.seeds import rng
from compactsim.harness.pipeline.ingest import ingest_result
from compactsim.harness.pipeline.planner import plan_evidence
from compactsim.scenarios.payloads import Call, build_response

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


def canonical_evidence_bytes(payloads: list[dict]) -> list[bytes]:
    """The exact bytes each call's `generation_evidence_digest` hashes (the ingest bound's SHA-256 input)."""
    out = []
    for p in payloads:
        for item in p["output"]:
            if "prompt_token_ids" in item:
                out.append(canonical_json({
                    "prompt_token_ids": item["prompt_token_ids"], "sampled_token_ids": item["generation_token_ids"],
                    "sampled_logprobs": [float(x) for x in item["generation_log_probs"]],
                }).encode("utf-8"))
    return out


def ingest_bound(texts: list[str], canonical: list[bytes]) -> int:
    """Parse every payload and hash every call's canonical evidence bytes: no validation, no objects."""
    parsed = [json.loads(t) for t in texts]
    digests = [hashlib.sha256(c).hexdigest() for c in canonical]
    return len(parsed) + len(digests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    payloads = [make_rollout(i) for i in range(args.rollouts)]
    texts = [json.dumps(p) for p in payloads]
    canonical = canonical_evidence_bytes(payloads)
    evidence = [ingest_result(p).evidence for p in payloads]  # burn-in
    tokens = sum(c.num_tokens for e in evidence for c in e.calls)
    arrays = [
        [
            (np.asarray(c.prompt_token_ids + c.sampled_token_ids, dtype=np.int32), np.asarray(c.prompt_token_ids, dtype=np.int32))
            for c in e.calls
        ]
        for e in evidence
    ]

    plan_times, bound_times, ingest_times, ingest_bound_times = [], [], [], []
    plan_evidence(evidence[0]), lower_bound(arrays[:1]), ingest_bound(texts[:1], canonical[:1])  # burn-in
    for _ in range(args.repeats):  # interleaved, candidate and bound in turn
        t = time.perf_counter()
        plans = [plan_evidence(e) for e in evidence]
        plan_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        splits = lower_bound(arrays)
        bound_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        ingested = [ingest_result(p) for p in payloads]
        ingest_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        ingest_bound(texts, canonical)
        ingest_bound_times.append(time.perf_counter() - t)
        del ingested
    assert all(p.trainable for p in plans)
    assert sum(len(p.traces) - 1 for p in plans) == splits == args.rollouts // 2

    plan_s, bound_s = statistics.median(plan_times), statistics.median(bound_times)
    ingest_s, ibound_s = statistics.median(ingest_times), statistics.median(ingest_bound_times)
    plan_ratio = statistics.median(p / b for p, b in zip(plan_times, bound_times))
    ingest_ratio = statistics.median(i / b for i, b in zip(ingest_times, ingest_bound_times))
    json_mb = sum(len(t) for t in texts) / 1e6
    print(f"workload: {args.rollouts} rollouts x {CALLS} calls, prompts up to {PROMPT_MAX} tokens, {tokens:,} tokens")
    print(f"planner (normalised evidence): {plan_s * 1e3:.1f} ms  -> {tokens / plan_s / 1e6:.1f} M tokens/s")
    print(f"numpy lower bound:            {bound_s * 1e3:.1f} ms  -> {tokens / bound_s / 1e6:.1f} M tokens/s")
    print(f"planner/bound: median {plan_ratio:.2f}x (n={args.repeats}; target <= 3x)")
    print(f"ingest (validation + digests): {ingest_s * 1e3:.0f} ms -> {tokens / ingest_s / 1e6:.2f} M tokens/s")
    print(f"ingest bound (json.loads of {json_mb:.1f} MB + SHA-256 of {sum(map(len, canonical)) / 1e6:.1f} MB canonical "
          f"bytes): {ibound_s * 1e3:.0f} ms")
    print(f"ingest/bound: median {ingest_ratio:.2f}x (n={args.repeats}; target <= 3x)")
    write_result(
        "planner",
        workload={"rollouts": args.rollouts, "calls": CALLS, "prompt_max": PROMPT_MAX, "sampled_per_call": SAMPLED,
                  "tokens": tokens, "compacted_share": 0.5, "repeats": args.repeats, "payload_json_mb": json_mb},
        metrics=[Metric("planner / numpy prefix bound", plan_ratio, "x", "<= 3"),
                 Metric("ingest / (json parse + sha256) bound", ingest_ratio, "x", "<= 3"),
                 Metric("planner throughput", tokens / plan_s / 1e6, "M tokens/s"),
                 Metric("ingest throughput", tokens / ingest_s / 1e6, "M tokens/s")],
        figures={"plan_s": plan_times, "bound_s": bound_times, "ingest_s": ingest_times, "ingest_bound_s": ingest_bound_times,
                 "plan_median_s": plan_s, "bound_median_s": bound_s, "ingest_median_s": ingest_s, "ingest_bound_median_s": ibound_s},
    )


if __name__ == "__main__":
    main()
