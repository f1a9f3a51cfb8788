"""The K=2 image-compaction reference run (20 GRPO steps) against the uncompacted run, side by side in one process.

Workload (issue 7): `pr-validation-image-compaction-k2` — 2 groups × 2 policy-mode rollouts per
step, 4 calls each with a screenshot after every tool call, one compaction per rollout (8 rows
per step) — and, as the baseline, `pr-validation-no-compaction` (the same rollouts without
compaction, 4 rows per step). After a one-step burn-in of each, both run their full 20 steps;
the report gives median seconds per step, tokens per second (real row tokens, prompts
included, per second of step time), the share of each step spent in generation (agents + mock
policy server), materialization (plan + advantages + rows) and training (logprobs, forward,
backward, optimizer), peak memory, and the candidate/baseline ratio.

    .venv/bin/python bench/bench_train.py [--steps 20] [--device cpu|cuda|auto] [--dtype float64] [--json]

Figures also go to `bench/results/train.json`.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import Metric, write_result  # noqa: E402
from compactsim.harness.core import metrics as M
from compactsim.harness.train_run import load_run_config, resolve_device, run_training

CANDIDATE = "pr-validation-image-compaction-k2"
BASELINE = "pr-validation-no-compaction"
SHARES = (("generation", M.TIMING_GENERATION), ("materialize", M.TIMING_MATERIALIZE), ("train", M.TIMING_TRAIN),
          ("weight push", M.TIMING_WEIGHT_PUSH))


def measure(scenario: str, *, steps: int, device: str, dtype: str) -> dict[str, Any]:
    """One run's per-step timings and token counts, and the memory peak it reached."""
    import torch

    records: list[Any] = []
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    run = load_run_config(scenario, seed=0, steps=steps, device=device, dtype=dtype, save_rollouts=False)
    run_training(run, None, on_step=records.append)
    wall = time.perf_counter() - start
    step_s = [r.timings[M.TIMING_STEP] for r in records]
    tokens = sum(int(r.metrics[M.TOTAL_NUM_TOKENS]) for r in records)
    total = sum(step_s)
    out: dict[str, Any] = {
        "scenario": scenario,
        "steps": len(records),
        "rows_per_step": int(records[0].metrics[M.NUM_PHYSICAL_ROWS]),
        "wall_s": wall,
        "median_step_s": statistics.median(step_s),
        "tokens_per_s": tokens / total,
        "train_tokens_per_s": tokens / sum(r.timings[M.TIMING_TRAIN] for r in records),
        "shares": {name: sum(r.timings[key] for r in records) / total for name, key in SHARES},
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "max_token_mult_prob_error_dev": max(abs(float(r.metrics[M.TOKEN_MULT_PROB_ERROR]) - 1) for r in records),
    }
    if device == "cuda":
        out["peak_cuda_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return out


def format_run(r: dict[str, Any]) -> str:
    shares = ", ".join(f"{name} {share:.0%}" for name, share in r["shares"].items())
    mem = f"peak RSS {r['peak_rss_mib']:.0f} MiB" + (f", peak CUDA {r['peak_cuda_mib']:.0f} MiB" if "peak_cuda_mib" in r else "")
    return (
        f"{r['scenario']}: {r['median_step_s']:.3f} s/step (median of {r['steps']}), {r['rows_per_step']} rows/step, "
        f"{r['tokens_per_s']:,.0f} tokens/s ({r['train_tokens_per_s']:,.0f} in training); {shares}; "
        f"{r['steps']} steps in {r['wall_s']:.1f} s; {mem}; max |tmpe-1| {r['max_token_mult_prob_error_dev']:.1e}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda", "auto"))
    parser.add_argument("--dtype", default="float64", choices=("float32", "float64", "bfloat16"))
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    device = resolve_device(args.device)

    for scenario in (BASELINE, CANDIDATE):  # burn-in: imports, allocator, first-call costs
        measure(scenario, steps=1, device=device, dtype=args.dtype)
    candidate = measure(CANDIDATE, steps=args.steps, device=device, dtype=args.dtype)
    baseline = measure(BASELINE, steps=args.steps, device=device, dtype=args.dtype)
    ratio = candidate["median_step_s"] / baseline["median_step_s"]
    write_result(
        "train",
        workload={"candidate": CANDIDATE, "baseline": BASELINE, "steps": args.steps, "device": device, "dtype": args.dtype},
        metrics=[Metric("k2 / no-compaction seconds per step", ratio, "x"),
                 Metric("k2 reference run, wall", candidate["wall_s"], "s", "< 20" if device == "cuda" else None),
                 Metric("k2 seconds per step", candidate["median_step_s"], "s"),
                 Metric("max |token_mult_prob_error - 1|", candidate["max_token_mult_prob_error_dev"], "")],
        figures={"candidate": candidate, "baseline": baseline},
    )
    if args.json:
        print(json.dumps({"device": device, "dtype": args.dtype, "candidate": candidate, "baseline": baseline,
                          "ratio_median_step_s": ratio}, indent=2))
        return
    print(f"device {device}, dtype {args.dtype}")
    print(format_run(candidate))
    print(format_run(baseline))
    print(f"train k2/no-compaction seconds per step: median {ratio:.2f}x "
          f"(n={args.steps} steps each, {candidate['rows_per_step']} vs {baseline['rows_per_step']} rows per step)")


if __name__ == "__main__":
    main()
