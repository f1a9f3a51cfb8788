"""One table over every `bench/results/*.json`: the end of `make bench`.

    .venv/bin/python bench/summarize.py [--dir bench/results] [--json]

Prints benchmark, metric, value, target and whether it was met, with each file's age, so a
stale figure (a benchmark that failed or was skipped this time) is visible. Exits 0 whatever
the figures are: benchmarks report, tests assert.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.results_io import FORMAT, RESULTS_DIR  # noqa: E402


def load(folder: Path) -> list[dict]:
    docs = []
    for path in sorted(folder.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"skipping {path.name}: {exc}", file=sys.stderr)
            continue
        if isinstance(doc, dict) and doc.get("format") == FORMAT:
            docs.append(doc)
    return docs


def _value(v: float, unit: str) -> str:
    if unit == "x":
        return f"{v:.2f}x"
    if abs(v) >= 100:
        return f"{v:,.0f} {unit}"
    return f"{v:.3g} {unit}"


def table(docs: list[dict]) -> list[tuple[str, ...]]:
    now = time.time()
    rows = []
    for doc in docs:
        age = now - float(doc.get("created_unix", now))
        when = f"{age / 60:.0f} min ago" if age < 3 * 3600 else f"{age / 3600:.0f} h ago"
        for m in doc.get("metrics", []):
            met = {True: "met", False: "MISSED", None: "-"}[m.get("met")]
            rows.append((doc["name"], m["name"], _value(float(m["value"]), m.get("unit", "")), m.get("target") or "-", met, when))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=RESULTS_DIR)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    docs = load(args.dir)
    rows = table(docs)
    if args.json:
        keys = ("benchmark", "metric", "value", "target", "status", "written")
        print(json.dumps([dict(zip(keys, r)) for r in rows], indent=2))
        return
    head = ("benchmark", "metric", "value", "target", "status", "written")
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    line = "  ".join("{:<" + str(w) + "}" for w in widths)
    print(f"\nbench summary ({len(docs)} result files in {args.dir})")
    print(line.format(*head))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print(line.format(*r))
    missed = sum(1 for r in rows if r[4] == "MISSED")
    print(f"{len(rows)} metrics, {sum(1 for r in rows if r[4] == 'met')} targets met, {missed} missed")


if __name__ == "__main__":
    main()
