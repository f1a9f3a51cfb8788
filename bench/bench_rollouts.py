"""Benchmark rollout collection: rollouts/s with threads, with worker processes and with Ray actors.

    .venv/bin/python bench/bench_rollouts.py                 # 256 rollouts x 8 calls, 4 rounds
    .venv/bin/python bench/bench_rollouts.py --rollouts 64 --executors local

Scripted mode, in-process mock model and reward servers in every worker. After a burn-in, the
rollouts are split into rounds; each round runs on the threads and the worker processes in turn
(the processes stay up between rounds, so their start-up is not counted), then on Ray in a phase
of its own (Ray's daemons use CPU while it is up, which would slow the others' rounds). Every
executor must produce the same artifacts, round by round. Reports the median rollouts/s
of each, their ratios to the threads, and the share of rollout time spent in the server (HTTP
round trip included), the agent (compaction, evidence capture) and the emitters (evidence +
ground-truth log). Target (issue 17): >= 27.6 rollouts/s, 3x the 9.2 measured before the
performance work, with the executor that uses the machine's cores (`processes`); threads share
one GIL and are reported beside it. Figures also go to `bench/results/rollouts.json`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

from compactsim.agents import (
    InProcessServers,
    LocalExecutor,
    ProcessExecutor,
    RayExecutor,
    RolloutScript,
    RolloutSpec,
    collect,
    policy_preset,
)
from compactsim.agents.collect import CollectedRollout, ray_session, server_script
from compactsim.agents.collect.rollouts import Timings
from compactsim.agents.rollout.script import scripted_turns

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import Metric, write_result  # noqa: E402

warnings.filterwarnings("ignore", message=".*starlette.testclient.*")


def make_specs(n: int, calls: int, offset: int = 0) -> list[RolloutSpec]:
    history = policy_preset("recency-images-k2")
    return [
        RolloutSpec(rollout_id=f"bench-{offset + i}", group_id=f"g{(offset + i) // 8}", task_id="bench",
                    rollout_index=(offset + i) % 8, seed=offset + i,
                    script=RolloutScript(turns=scripted_turns(0, turns=calls)), context_history=history)
        for i in range(n)
    ]


def servers_for(specs: list[RolloutSpec]) -> InProcessServers:
    return InProcessServers({"seed": 0, "script": server_script(specs)}, {"rule": {"kind": "pattern", "pattern": [1.0, 0.0]}})


def run_round(executor, specs: list[RolloutSpec]) -> tuple[float, list[CollectedRollout]]:
    start = time.perf_counter()
    out = collect(specs, servers_for(specs), executor=executor)
    elapsed = time.perf_counter() - start
    assert all(c.status == "completed" for c in out), [c.failure for c in out if c.status != "completed"]
    return len(specs) / elapsed, out


def share_values(timings: list[Timings]) -> dict[str, float]:
    server = sum(t.server_s for t in timings)
    agent = sum(t.agent_s for t in timings)
    emitter = sum(t.emitter_s for t in timings)
    total = server + agent + emitter or 1.0
    return {"server": server / total, "agent": agent / total, "emitter": emitter / total}


def shares(timings: list[Timings]) -> str:
    return "  ".join(f"{k} {v:.0%}" for k, v in share_values(timings).items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--calls", type=int, default=8, help="model calls per rollout")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="threads (local), processes and actors (ray)")
    parser.add_argument("--executors", default="local,processes,ray")
    args = parser.parse_args()
    kinds = [k.strip() for k in args.executors.split(",") if k.strip()]
    per_round = max(args.rollouts // args.rounds, 1)
    rounds = [make_specs(per_round, args.calls, offset=r * per_round) for r in range(args.rounds)]
    executors = {"local": LocalExecutor(args.workers), "processes": ProcessExecutor(args.workers),
                 "ray": RayExecutor(args.workers)}
    print(f"rollouts: {per_round * args.rounds} x {args.calls} calls in {args.rounds} rounds, workers={args.workers}")

    rates: dict[str, list[float]] = {k: [] for k in kinds}
    # only the timings are kept: holding every round's results would grow this process's heap round
    # by round, and the collector's passes over it would slow the later rounds
    collected: dict[str, list[Timings]] = {k: [] for k in kinds}
    digests: list[list[str] | None] = [None] * len(rounds)

    def measure(phase: list[str]) -> None:
        """Burn-in, then every round on each executor of `phase` in turn; every executor must give the same artifacts."""
        burn = make_specs(min(8, per_round), args.calls, offset=10_000)
        for kind in phase:
            run_round(executors[kind], burn)
        for r, specs in enumerate(rounds):
            for kind in phase:
                rate, out = run_round(executors[kind], specs)
                rates[kind].append(rate)
                collected[kind].extend(c.timings for c in out)
                got = [c.artifact_digest() for c in out]
                assert digests[r] in (None, got), f"{kind} disagrees with the other executors on the artifacts"
                digests[r] = got

    # Ray's own processes (raylet, GCS, idle actors) take CPU while it is up, so its rounds run in a
    # phase of their own: the threads and worker processes are measured without it in the background
    with executors["processes"]:
        measure([k for k in kinds if k != "ray"])
    if "ray" in kinds:
        with ray_session(args.workers):
            measure(["ray"])

    for kind in kinds:
        print(f"{kind:>5}: median {statistics.median(rates[kind]):6.1f} rollouts/s  "
              f"(rounds: {', '.join(f'{r:.1f}' for r in rates[kind])})  {shares(collected[kind])}")
    target = {"processes": ">= 27.6"}
    metrics = [Metric(f"{kind} collection", statistics.median(rates[kind]), "rollouts/s", target.get(kind)) for kind in kinds]
    metrics += [Metric(f"{kind} time in the server", share_values(collected[kind])["server"], "share") for kind in kinds]
    for kind in [k for k in kinds if k != "local" and "local" in kinds]:
        ratios = [b / a for a, b in zip(rates["local"], rates[kind])]
        print(f"{kind}/local: median {statistics.median(ratios):.2f}x (n={len(ratios)}, "
              f"{per_round} rollouts x {args.calls} calls per round)")
        metrics.append(Metric(f"{kind} / local rollouts/s", statistics.median(ratios), "x"))
    write_result(
        "rollouts",
        workload={"rollouts": per_round * args.rounds, "calls": args.calls, "rounds": args.rounds,
                  "workers": args.workers, "executors": kinds, "mode": "scripted", "policy": "recency-images-k2"},
        metrics=metrics,
        figures={"rates": rates, "shares": {k: share_values(collected[k]) for k in kinds}},
    )


if __name__ == "__main__":
    main()
