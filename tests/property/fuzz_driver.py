"""Long-run evidence fuzzing: `python -m tests.property.fuzz_driver --cases 100000 [--seed 0]`.

Draws cases from the same seeds and operators as the CI property test, but from a seeded RNG, so
a long run is reproducible (`--seed`, and `--start` to resume at a case number). Prints
`N cases, K untyped` and the elapsed seconds; exits 1 when K > 0. Each untyped failure's payload
is written under `--out` (one JSON file per case) to be shrunk into a regression fixture.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

from tests.property.fuzz_evidence import mutated_case, run_case


class RandomChooser:
    """`Chooser` over a `random.Random` (one per case, keyed by seed and case number)."""

    def __init__(self, seed: int, case: int) -> None:
        self._rng = random.Random(f"compactsim-fuzz/{seed}/{case}")

    def integer(self, lo: int, hi: int) -> int:
        return self._rng.randint(lo, hi)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000, help="number of cases (default 100000)")
    parser.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    parser.add_argument("--start", type=int, default=0, help="first case number (default 0)")
    parser.add_argument("--out", type=Path, default=Path("out/fuzz-failures"), help="where untyped cases are written")
    parser.add_argument("--progress", type=int, default=10_000, help="print a progress line every N cases (0: never)")
    args = parser.parse_args(argv)

    started = time.monotonic()
    untyped = 0
    verdicts: Counter[str] = Counter()
    for case in range(args.start, args.start + args.cases):
        seed_name, ops, payload = mutated_case(RandomChooser(args.seed, case))
        outcome = run_case(payload)
        verdicts[outcome.verdict] += 1
        if outcome.untyped:
            untyped += 1
            args.out.mkdir(parents=True, exist_ok=True)
            record = {"case": case, "seed": args.seed, "seed_payload": seed_name, "operators": ops,
                      "failure": outcome.failure}
            try:
                record["payload"] = payload
                text = json.dumps(record, default=repr)
            except (ValueError, RecursionError):
                record.pop("payload")
                text = json.dumps(record, default=repr)
            (args.out / f"case-{args.seed}-{case}.json").write_text(text)
            print(f"case {case}: UNTYPED ({seed_name}, {ops}): {(outcome.failure or '').strip().splitlines()[-1]}",
                  flush=True)
        done = case - args.start + 1
        if args.progress and done % args.progress == 0:
            print(f"... {done} cases, {untyped} untyped, {time.monotonic() - started:.1f} s", flush=True)
    elapsed = time.monotonic() - started
    top = ", ".join(f"{v} {n}" for v, n in verdicts.most_common(8))
    print(f"verdicts: {top}")
    print(f"{args.cases} cases, {untyped} untyped, {elapsed:.1f} s")
    return 1 if untyped else 0


if __name__ == "__main__":
    sys.exit(main())
