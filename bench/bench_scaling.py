"""How plan + materialize cost grows with batch tokens: sizes from 1e4 to 1e7 tokens, fitted log-log slope.

Each size is a batch of synthetic rollouts (8 calls each, every call adding the same number of
tokens, a quarter of them sampled; every other rollout compacted before call 5 into a declared
boundary, so it becomes two rows) with vLLM-packed routes [tokens, L=2, K=2] int16. The cost is
`plan_evidence` on every rollout plus `compute_logical_advantages` + `prepare_trace_batch`, the
median of a few repeats. A slope near 1 means linear; the target is <= 1.05 (no superlinear
term). Small sizes carry fixed per-call overhead, which only lowers the slope.

The payload is light-weight so 1e7 tokens fit comfortably in memory: a rollout's prompts are
slices of one token tuple (its calls share id objects, as `ingest` makes them share) and its
routes are views of one array, so evidence costs ~8 bytes per prompt token rather than a Python
int each. Peak resident memory is printed per size.

    .venv/bin/python bench/bench_scaling.py [--sizes 1e4,1e5,1e6,1e7] [--repeats 3]

Figures also go to `bench/results/scaling.json`.
"""

from __future__ import annotations

import argparse
import gc
import math
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import Metric, write_result  # noqa: E402
from compactsim.harness.core.evidence import BoundaryEvent, ModelCall, RolloutEvidence  # noqa: E402
from compactsim.harness.core.seeds import rng  # noqa: E402
from compactsim.harness.pipeline.advantages import compute_logical_advantages  # noqa: E402
from compactsim.harness.pipeline.materializer import prepare_trace_batch  # noqa: E402
from compactsim.harness.pipeline.planner import plan_evidence  # noqa: E402
from compactsim.harness.pipeline.train_config import AdvantageConfig, MaterializeConfig  # noqa: E402

CALLS = 8
BOUNDARY = 4  # 0-based index of the call that follows the compaction
GROUP = 4
LAYOUT = (2, 2)


def rollout(index: int, tokens_per_call: int) -> RolloutEvidence:
    """One rollout of CALLS calls whose final row holds CALLS * tokens_per_call tokens."""
    g = rng(0, "bench_scaling", rollout=index)
    sampled = max(1, tokens_per_call // 4)
    delta = tokens_per_call - sampled
    total = CALLS * tokens_per_call
    summary = max(1, tokens_per_call // 4)
    stream = tuple(g.integers(20, 250, total).tolist())
    compacted = index % 2 == 1
    rewritten = stream[:summary] + stream[BOUNDARY * tokens_per_call:]
    routes = g.integers(0, 8, (total + summary + 1, *LAYOUT)).astype(np.int16)
    calls = []
    for j in range(CALLS):
        if compacted and j >= BOUNDARY:
            src, start = rewritten, summary + (j - BOUNDARY) * tokens_per_call + delta
        else:
            src, start = stream, j * tokens_per_call + delta
        end = start + sampled
        boundary = compacted and j == BOUNDARY
        calls.append(ModelCall(
            turn_id=j + 1, prompt_token_ids=src[:start], sampled_token_ids=src[start:end],
            sampled_logprobs=(-0.25,) * sampled, routed_experts=routes[:end],
            expected_append_compatible=j > 0 and not boundary, compaction_event_id="ev-5" if boundary else None,
            policy_version=0,
        ))
    events = (BoundaryEvent(event_id="ev-5", trigger_after_step=BOUNDARY, applies_to_step=BOUNDARY + 1),) if compacted else ()
    return RolloutEvidence(
        rollout_id=f"r{index:05d}", flavour="gym-0.7.0-transport", calls=tuple(calls), group_id=f"g{index // GROUP:05d}",
        rollout_index=index % GROUP, boundary_events=events, reward=float(index % 3),
        contract_key="context_compaction_contract",
    )


def batch_shape(size: float) -> tuple[int, int]:
    """(rollouts, tokens per call) for about `size` row tokens: both grow, rollouts a multiple of GROUP."""
    rollouts = max(GROUP, GROUP * round(math.sqrt(size / 1e4)))
    per_rollout = size / rollouts
    return rollouts, max(8, round(per_rollout / CALLS))


def run_once(evidence: list[RolloutEvidence], cfg: MaterializeConfig, adv: AdvantageConfig) -> int:
    plans = [plan_evidence(e) for e in evidence]
    assert all(p.trainable for p in plans), plans[0].violations[:1]
    logical = compute_logical_advantages([p.evidence for p in plans], adv)
    batch = prepare_trace_batch(plans, None, logical, cfg)
    return int(batch.row_input_lengths.sum())


def fit_slope(xs: list[float], ys: list[float]) -> float:
    lx, ly = np.log(xs), np.log(ys)
    return float(np.polyfit(lx, ly, 1)[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1e4,1e5,1e6,1e7", help="approximate batch tokens, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    sizes = [float(s) for s in args.sizes.split(",")]
    adv = AdvantageConfig(num_generations_per_prompt=GROUP)
    cfg = MaterializeConfig(num_generations_per_prompt=GROUP)

    rows = []
    for size in sizes:
        n, per_call = batch_shape(size)
        evidence = [rollout(i, per_call) for i in range(n)]
        tokens = run_once(evidence, cfg, adv)  # burn-in; also the real row tokens
        times = []
        for _ in range(args.repeats):
            gc.collect()
            t0 = time.perf_counter()
            run_once(evidence, cfg, adv)
            times.append(time.perf_counter() - t0)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        sec = statistics.median(times)
        rows.append({"target_tokens": size, "tokens": tokens, "rollouts": n, "tokens_per_call": per_call,
                     "seconds": sec, "seconds_all": times, "tokens_per_s": tokens / sec, "peak_rss_mib": peak})
        print(f"{tokens:>12,} tokens  {n:>4} rollouts x {CALLS} calls x {per_call:>6} tokens/call  "
              f"{sec * 1e3:9.1f} ms  {tokens / sec / 1e6:6.2f} M tokens/s  peak RSS {peak:,.0f} MiB")
        del evidence
        gc.collect()

    slope = fit_slope([r["tokens"] for r in rows], [r["seconds"] for r in rows])
    top = fit_slope([r["tokens"] for r in rows[-2:]], [r["seconds"] for r in rows[-2:]]) if len(rows) >= 2 else slope
    print(f"plan + materialize cost vs batch tokens: fitted log-log slope {slope:.3f} over {len(rows)} sizes "
          f"(largest two sizes alone: {top:.3f}); target <= 1.05")
    write_result(
        "scaling",
        workload={"sizes": sizes, "calls": CALLS, "group": GROUP, "route_layout": list(LAYOUT), "repeats": args.repeats,
                  "compacted_share": 0.5},
        metrics=[Metric("log-log slope, plan + materialize vs tokens", slope, "", "<= 1.05"),
                 Metric("slope over the largest two sizes", top, "")],
        figures={"points": rows},
    )


if __name__ == "__main__":
    main()
