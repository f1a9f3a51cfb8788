"""Machine-readable benchmark figures: every `bench/bench_*.py` writes `bench/results/<name>.json`.

One file per benchmark, overwritten by each run, so CI or a person can track the figures over
time. Each holds the workload, one entry per headline metric (value, unit, target, whether it
was met), the absolute numbers behind the ratios, and the versions and machine that produced
them. `bench/summarize.py` prints one table over all of them (the end of `make bench`).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
FORMAT = "compactsim-bench/1"


@dataclass(frozen=True, slots=True)
class Metric:
    """One headline figure; `target` reads like "<= 3" or ">= 0.5" (None: tracked, no target)."""

    name: str
    value: float
    unit: str
    target: str | None = None

    @property
    def met(self) -> bool | None:
        if self.target is None:
            return None
        op, _, bound = self.target.partition(" ")
        limit = float(bound)
        return {"<=": self.value <= limit, ">=": self.value >= limit, "<": self.value < limit, ">": self.value > limit}[op]


def versions() -> dict[str, Any]:
    """Interpreter, libraries and machine, so figures from different runs can be told apart."""
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    for mod in ("numpy", "torch", "pydantic", "fastapi"):
        try:
            out[mod] = __import__(mod).__version__
        except ImportError:
            out[mod] = None
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch_threads"] = torch.get_num_threads()
        out["cuda"] = bool(torch.cuda.is_available())
    return out


def write_result(name: str, *, workload: dict[str, Any], metrics: list[Metric], figures: dict[str, Any],
                 out_dir: Path | None = None) -> Path:
    """Write `<out_dir>/<name>.json` (default `bench/results/`) and return its path."""
    folder = out_dir or Path(os.environ.get("COMPACTSIM_BENCH_RESULTS", RESULTS_DIR))
    folder.mkdir(parents=True, exist_ok=True)
    doc = {
        "format": FORMAT,
        "name": name,
        "created_unix": round(time.time(), 3),
        "argv": sys.argv[1:],
        "workload": workload,
        "metrics": [{**asdict(m), "met": m.met} for m in metrics],
        "figures": figures,
        "versions": versions(),
    }
    path = folder / f"{name}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True, default=_plain) + "\n")
    tmp.replace(path)
    print(f"results: {path}")
    return path


def _plain(value: Any) -> Any:
    """numpy scalars and other number-likes as plain JSON numbers."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)


__all__ = ["FORMAT", "RESULTS_DIR", "Metric", "versions", "write_result"]
