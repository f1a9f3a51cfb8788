"""Materializer throughput and peak memory against a lower bound, measured side by side in one process.

Workload (issue #3): 64 groups × 8 rollouts × 8 calls; each call adds 2,048 tokens to the
context (1,536 prompt tokens + 512 sampled), so an uncompacted rollout is one 16,384-token row.
Half of the rollouts are compacted into K = 2 physical traces: before call 5 the context is
rewritten to a 512-token summary, so they become two rows (calls 1-4, then summary + calls 5-8).
Routes are vLLM-packed [tokens, L=2, K=2] int16 per call. Media are left out (image decoding is
cached per batch and is not what this measures).

The lower bound allocates the same output tensors and fills them from preloaded numpy arrays
(each row's final token ids, mask spans, logprobs and already-repaired routes): the copy work
any materializer must do. The candidate is `compute_logical_advantages` + `prepare_trace_batch`
on the planned rollouts. Peak memory is the resident-set high-water mark (reset through
/proc/self/clear_refs) above the resident size before the call, measured once per side in a
forked child so that heap freed by an earlier run cannot hide an allocation.

    .venv/bin/python bench/bench_materializer.py [--groups 64] [--tokens-per-call 2048] [--repeats 5]

Figures also go to `bench/results/materializer.json`.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import Metric, write_result  # noqa: E402
from compactsim.harness.core.evidence import ModelCall, RolloutEvidence
from compactsim.harness.core.seeds import rng
from compactsim.harness.core.trace_plan import PhysicalTrace, TracePlan, physical_trace_id
from compactsim.harness.pipeline.advantages import compute_logical_advantages
from compactsim.harness.pipeline.materializer import prepare_trace_batch
from compactsim.harness.pipeline.train_config import AdvantageConfig, MaterializeConfig

LAYOUT = (2, 2)
CALLS = 8
BOUNDARY_CALL = 4  # 0-based: the 5th call starts the second trace of a compacted rollout


def _rollout(group: int, index: int, *, tokens_per_call: int, sampled: int, summary: int) -> TracePlan:
    """One rollout; its prompts are slices of one token stream (two streams when compacted)."""
    rid = f"g{group:03d}-r{index}"
    g = rng(0, "bench_materializer", rollout=rid)
    compacted = index % 2 == 1
    delta = tokens_per_call - sampled
    n_stream = CALLS * tokens_per_call
    stream = tuple(g.integers(10, 30_000, n_stream).tolist())
    stream_routes = g.integers(0, 64, (n_stream + summary + 1, *LAYOUT)).astype(np.int16)
    rewritten = (5,) + tuple(g.integers(10, 30_000, summary).tolist()) + stream[BOUNDARY_CALL * tokens_per_call :]
    calls: list[ModelCall] = []
    for j in range(CALLS):
        if compacted and j >= BOUNDARY_CALL:
            src, start = rewritten, 1 + summary + (j - BOUNDARY_CALL) * tokens_per_call + delta
        else:
            src, start = stream, j * tokens_per_call + delta
        end = start + sampled
        routes = stream_routes[:end].copy()
        routes[end - 1] = np.arange(LAYOUT[1], dtype=np.int16)  # vLLM's final-token placeholder
        calls.append(
            ModelCall(
                turn_id=j + 1,
                prompt_token_ids=src[:start],
                sampled_token_ids=src[start:end],
                sampled_logprobs=tuple((-0.001 * np.arange(1, sampled + 1)).tolist()),
                routed_experts=routes,
                expected_append_compatible=j > 0 and not (compacted and j == BOUNDARY_CALL),
                policy_version=0,
            )
        )
    bounds = [0, BOUNDARY_CALL, CALLS] if compacted else [0, CALLS]
    evidence = RolloutEvidence(
        rollout_id=rid, flavour="gym-0.7.0-transport", calls=tuple(calls), group_id=f"g{group:03d}",
        rollout_index=index, reward=float(index % 3), contract_key="context_compaction_contract",
    )
    traces = tuple(
        PhysicalTrace(
            trace_id=physical_trace_id(rid, k),
            trace_index=k,
            call_indices=tuple(range(bounds[k], bounds[k + 1])),
            turn_ids=tuple(range(bounds[k] + 1, bounds[k + 1] + 1)),
            media_ids=(),
            start_reason="rollout_start" if k == 0 else "declared_boundary",
            num_tokens=calls[bounds[k + 1] - 1].num_tokens,
            num_sampled_tokens=sampled * (bounds[k + 1] - bounds[k]),
        )
        for k in range(len(bounds) - 1)
    )
    return TracePlan(rollout_id=rid, path="physical" if compacted else "single", traces=traces, evidence=evidence)


def _preloaded_rows(plans: list[TracePlan], logical: Any) -> list[tuple]:
    """Per row: final ids, mask spans, per-span logprobs, advantage, final repaired routes (numpy)."""
    rows = []
    for plan in plans:
        adv = logical.advantage_of(plan.rollout_id)
        for k, trace in enumerate(plan.traces):
            calls = [plan.evidence.calls[i] for i in trace.call_indices]
            last = calls[-1]
            ids = np.asarray(last.prompt_token_ids + last.sampled_token_ids, dtype=np.int64)
            spans = [(len(c.prompt_token_ids), c.num_tokens) for c in calls]
            lps = [np.asarray(c.sampled_logprobs, dtype=np.float64) for c in calls]
            routes = last.routed_experts[: last.num_tokens].copy()
            for c, nxt in zip(calls, calls[1:], strict=False):
                routes[c.num_tokens - 1] = nxt.routed_experts[c.num_tokens - 1]
            if k < len(plan.traces) - 1:
                routes[last.num_tokens - 1] = -1
            rows.append((ids, spans, lps, adv, routes))
    return rows


def lower_bound(rows: list[tuple], num_rows: int, seq_len: int) -> dict[str, torch.Tensor]:
    """Allocate the output tensors and copy preloaded arrays into them: the unavoidable work."""
    ids = torch.zeros((num_rows, seq_len), dtype=torch.int64)
    mask = torch.zeros((num_rows, seq_len), dtype=torch.float32)
    lps = torch.zeros((num_rows, seq_len), dtype=torch.float32)
    adv = torch.zeros((num_rows, seq_len), dtype=torch.float32)
    routes = torch.empty((num_rows, seq_len, *LAYOUT), dtype=torch.int16)
    ids_np, mask_np, lp_np, adv_np, routes_np = ids.numpy(), mask.numpy(), lps.numpy(), adv.numpy(), routes.numpy()
    routes_np[...] = np.arange(LAYOUT[1], dtype=np.int16)
    lengths = torch.zeros((num_rows,), dtype=torch.int32)
    for r, (row_ids, spans, row_lps, a, row_routes) in enumerate(rows):
        n = row_ids.shape[0]
        ids_np[r, :n] = row_ids
        for (s, e), lp in zip(spans, row_lps, strict=True):
            mask_np[r, s:e] = 1.0
            lp_np[r, s:e] = lp
            adv_np[r, s:e] = a
        routes_np[r, :n] = row_routes
        lengths[r] = n
    return {"ids": ids, "mask": mask, "lps": lps, "adv": adv, "routes": routes, "lengths": lengths}


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_memory(fn: Callable[[], Any]) -> int:
    """Peak resident bytes `fn` adds, measured in a forked child so no earlier run's freed heap is reused."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: reset the high-water mark, run once, report, exit without cleanup
        os.close(read)
        gc.collect()
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM := current VmRSS
        before = _rss_kib("VmRSS")
        out = fn()
        os.write(write, str((_rss_kib("VmHWM") - before) * 1024).encode())
        del out
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        value = int(pipe.read() or -1)
    os.waitpid(pid, 0)
    return value


def timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    del out
    return seconds


def _nbytes(tensors: list[torch.Tensor | None]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--rollouts-per-group", type=int, default=8)
    parser.add_argument("--tokens-per-call", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)

    tpc = args.tokens_per_call
    sampled, summary = tpc // 4, tpc // 4
    t0 = time.perf_counter()
    plans = [
        _rollout(g, i, tokens_per_call=tpc, sampled=sampled, summary=summary)
        for g in range(args.groups)
        for i in range(args.rollouts_per_group)
    ]
    adv_cfg = AdvantageConfig(num_generations_per_prompt=args.rollouts_per_group)
    cfg = MaterializeConfig(num_generations_per_prompt=args.rollouts_per_group)
    logical = compute_logical_advantages([p.evidence for p in plans], adv_cfg)
    rows = _preloaded_rows(plans, logical)
    build_s = time.perf_counter() - t0
    num_rows = len(rows)
    seq_len = max(r[0].shape[0] for r in rows)
    real_tokens = sum(r[0].shape[0] for r in rows)

    def candidate():
        lg = compute_logical_advantages([p.evidence for p in plans], adv_cfg)
        return prepare_trace_batch(plans, None, lg, cfg)

    def baseline():
        return lower_bound(rows, num_rows, seq_len)

    # memory first, in fresh forked children (the parent has not run either yet)
    base_mem, cand_mem = peak_memory(baseline), peak_memory(candidate)
    # burn-in (also checks that both fill the same rows)
    batch, bound = candidate(), baseline()
    assert batch.num_rows == num_rows and batch.seq_len == seq_len
    assert torch.equal(batch.row_input_ids, bound["ids"]) and torch.equal(batch.routed_experts, bound["routes"])
    assert torch.equal(batch.row_token_mask, bound["mask"]) and torch.equal(batch.row_advantages, bound["adv"])
    out_bytes = _nbytes([batch.row_input_ids, batch.row_input_lengths, batch.row_token_mask,
                         batch.row_generation_logprobs, batch.row_advantages, batch.row_sample_mask,
                         batch.parent_indices, batch.row_trace_index, batch.row_generation_policy_version,
                         batch.routed_experts])
    del batch, bound

    cand_s, base_s = [], []
    for _ in range(args.repeats):  # interleaved
        base_s.append(timed(baseline))
        cand_s.append(timed(candidate))

    c, b = statistics.median(cand_s), statistics.median(base_s)
    ratio = statistics.median(x / y for x, y in zip(cand_s, base_s))
    mib = 1024 * 1024
    print(
        f"workload: {len(plans)} rollouts ({args.groups} groups × {args.rollouts_per_group}), {CALLS} calls × {tpc} "
        f"tokens, half compacted (K=2) → {num_rows} rows × {seq_len} tokens, {real_tokens:,} real tokens "
        f"(built in {build_s:.1f} s)"
    )
    print(f"candidate: median {c:.3f} s  {num_rows / c:,.0f} rows/s  {real_tokens / c / 1e6:.2f} M tokens/s")
    print(f"lower bound: median {b:.3f} s  {num_rows / b:,.0f} rows/s  {real_tokens / b / 1e6:.2f} M tokens/s")
    print(f"materialize/lower-bound: median {ratio:.2f}x (n={args.repeats}; target ≤ 2x)")
    print(
        f"peak memory above start: candidate {cand_mem / mib:.0f} MiB, lower bound {base_mem / mib:.0f} MiB, "
        f"output tensors {out_bytes / mib:.0f} MiB → candidate/output {cand_mem / out_bytes:.2f}x (target ≤ 1.3x)"
    )
    write_result(
        "materializer",
        workload={"rollouts": len(plans), "groups": args.groups, "rollouts_per_group": args.rollouts_per_group,
                  "calls": CALLS, "tokens_per_call": tpc, "rows": num_rows, "seq_len": seq_len,
                  "real_tokens": real_tokens, "route_layout": list(LAYOUT), "repeats": args.repeats},
        metrics=[Metric("materialize / fill bound", ratio, "x", "<= 2"),
                 Metric("peak memory / output tensors", cand_mem / out_bytes, "x", "<= 1.3"),
                 Metric("materialize throughput", real_tokens / c / 1e6, "M tokens/s")],
        figures={"candidate_s": cand_s, "bound_s": base_s, "candidate_peak_bytes": cand_mem,
                 "bound_peak_bytes": base_mem, "output_bytes": out_bytes, "build_s": build_s},
    )


if __name__ == "__main__":
    main()
