"""Benchmark the default suite: wall time, peak memory and the share of each stage; plus servers http/in-process.

    .venv/bin/python bench/bench_suite.py                 # the whole default suite, in process and on workers
    .venv/bin/python bench/bench_suite.py --quick         # a few small scenarios (under a minute)
    .venv/bin/python bench/bench_suite.py --ratio-runs 5  # more interleaved runs for the server ratio

Part 1 runs the selected scenarios once, in this process (the `compactsim run --parallel 1` path,
minus file writing) and prints total wall seconds, peak resident memory, and the share of wall time
spent in each runner stage (collect = agents + mock servers, plan, materialize, train, weights, oracle,
audit, write = artifact encoding); then once more as `make run` runs them, on the default number of
worker processes (target: < 120 s for the default suite). Part 2 measures, after a burn-in, the
same small scenarios with the mock servers on real loopback ports (http) against in-process ASGI,
interleaved, and prints the median ratio with the counts behind it. No test asserts these numbers. Figures also
go to `bench/results/suite.json`.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore", category=DeprecationWarning)

from bench.results_io import Metric, write_result  # noqa: E402

QUICK = ("explicit-logprobs", "image-compaction-k2-rolling", "summary-compaction", "legacy-token-merge-drift")


def _suite(names: tuple[str, ...]) -> dict:
    from compactsim.harness.runner import STAGES, RunOptions, resolve_scenarios, run_suite

    scenarios = resolve_scenarios(list(names))
    t0 = time.perf_counter()
    runs = run_suite(scenarios, RunOptions())
    wall = time.perf_counter() - t0
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    stages = {k: sum(r.record.stage_seconds.get(k, 0.0) for r in runs) for k in STAGES}
    passed = sum(1 for r in runs if r.record.passed)
    print(f"suite, in this process (--parallel 1): {len(runs)} scenarios ({passed} met their verdict) in {wall:.1f} s "
          f"wall, peak RSS {peak_mib:.0f} MiB")
    for k in STAGES:
        print(f"  stage {k:<12} {stages[k]:7.2f} s  {100.0 * stages[k] / wall:5.1f}%")
    other = wall - sum(stages.values())
    print(f"  {'other':<18} {other:7.2f} s  {100.0 * other / wall:5.1f}%  (servers start/stop, trainer init)")
    slowest = sorted(runs, key=lambda r: -r.record.seconds)[:5]
    print("  slowest: " + ", ".join(f"{r.record.name} {r.record.seconds:.1f}s" for r in slowest))
    return {"scenarios": len(runs), "passed": passed, "wall_s": wall, "peak_rss_mib": peak_mib, "stages_s": stages,
            "other_s": other, "slowest": [(r.record.name, r.record.seconds) for r in slowest]}


def _parallel_suite(names: tuple[str, ...]) -> dict:
    """The same scenarios the way `make run` runs them: on the default number of worker processes."""
    from compactsim.harness.local_pool import default_workers
    from compactsim.harness.runner import RunOptions, resolve_scenarios, run_suite

    scenarios = resolve_scenarios(list(names))
    workers = default_workers()
    t0 = time.perf_counter()
    runs = run_suite(scenarios, RunOptions(), parallel=workers)
    wall = time.perf_counter() - t0
    passed = sum(1 for r in runs if r.record.passed)
    print(f"suite, as `make run` runs it (--parallel {workers}): {len(runs)} scenarios ({passed} met their verdict) in "
          f"{wall:.1f} s wall, target < 120 s: {'met' if wall < 120 else 'MISSED'}")
    return {"scenarios": len(runs), "passed": passed, "wall_s": wall, "workers": workers}


def _ratio(names: tuple[str, ...], runs: int) -> dict:
    from compactsim.harness.runner import RunOptions, resolve_scenarios, run_suite

    scenarios = resolve_scenarios(list(names))
    asgi, http = RunOptions(), RunOptions(server="http")
    run_suite(scenarios, asgi)  # burn-in: imports, first server start
    run_suite(scenarios, http)
    base: list[float] = []
    cand: list[float] = []
    for _ in range(runs):
        for opts, sink in ((asgi, base), (http, cand)):
            t0 = time.perf_counter()
            run_suite(scenarios, opts)
            sink.append(time.perf_counter() - t0)
    ratios = [c / b for b, c in zip(base, cand)]
    print(f"servers http/in-process: median {statistics.median(ratios):.2f}x (n={runs}, {len(scenarios)} scenarios; "
          f"in-process median {statistics.median(base):.2f} s, http median {statistics.median(cand):.2f} s)")
    return {"ratio": statistics.median(ratios), "ratios": ratios, "in_process_s": base, "http_s": cand,
            "scenarios": list(names)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only a few small scenarios")
    parser.add_argument("--ratio-runs", type=int, default=3, help="interleaved runs per side for the server ratio")
    parser.add_argument("--no-ratio", action="store_true", help="skip the http/in-process comparison")
    args = parser.parse_args()
    import torch

    from compactsim.harness.core.gc_passes import use_fewer_gc_passes

    torch.set_num_threads(1)
    use_fewer_gc_passes()  # this process stands for the `compactsim` command, which raises them at start
    names = QUICK if args.quick else ()
    suite = _suite(names)
    parallel = _parallel_suite(names)
    ratio = None if args.no_ratio else _ratio(QUICK, args.ratio_runs)
    label = "default suite" if not args.quick else "quick suite"
    metrics = [Metric(f"{label} wall, make run ({parallel['workers']} workers)", parallel["wall_s"], "s",
                      None if args.quick else "< 120"),
               Metric(f"{label} wall, one process", suite["wall_s"], "s"),
               Metric("scenarios meeting their verdict", min(suite["passed"], parallel["passed"]) / max(suite["scenarios"], 1),
                      "share", ">= 1")]
    if ratio is not None:
        metrics.append(Metric("servers http / in-process", ratio["ratio"], "x"))
    write_result("suite", workload={"quick": args.quick, "ratio_runs": args.ratio_runs},
                 metrics=metrics, figures={"suite": suite, "ratio": ratio})


if __name__ == "__main__":
    main()
