"""`summary.json`: the machine-readable outcome of a suite run, stable keys, no timings.

Two runs with the same seed, code and selection write byte-identical summaries, whatever the
executor or worker count: it holds only deterministic values (seed, versions, verdicts,
findings, per-step metrics) serialised with sorted keys. Wall-clock figures go to
`timings.json` (`format_timings`).
"""

from __future__ import annotations

import json
import platform
from collections.abc import Mapping
from typing import Any

from compactsim.harness.report.records import SuiteRecord

SUMMARY_FORMAT = "compactsim-summary/1"


def collect_versions() -> dict[str, str]:
    """Versions of compactsim and the libraries that shape its numbers (what summary.json records)."""
    from importlib import metadata

    out: dict[str, str] = {"python": platform.python_version()}
    for dist in ("compactsim", "torch", "numpy", "pydantic", "fastapi", "httpx"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "unknown"
    from compactsim.harness.core.artifacts import ARTIFACT_FORMAT

    out["artifact_format"] = ARTIFACT_FORMAT
    return out


def format_summary(suite: SuiteRecord) -> dict[str, Any]:
    """The summary as a JSON-ready dict."""
    failed = [s.name for s in suite.scenarios if not s.passed]
    return {
        "format": SUMMARY_FORMAT,
        "seed": suite.seed,
        "backend": suite.backend,
        "device": suite.device,
        "selection": list(suite.selection),
        "versions": dict(suite.versions),
        "gym": dict(suite.gym),
        "passed": suite.passed,
        "counts": {
            "scenarios": len(suite.scenarios),
            "passed": len(suite.scenarios) - len(failed),
            "failed": len(failed),
            "findings": sum(len(s.findings) for s in suite.scenarios),
        },
        "failed": failed,
        "scenarios": [s.to_json() for s in suite.scenarios],
    }


def format_summary_json(suite: SuiteRecord) -> str:
    """`summary.json`'s exact text: sorted keys, two-space indent, trailing newline."""
    return json.dumps(format_summary(suite), indent=2, sort_keys=True, allow_nan=False) + "\n"


def format_timings(suite: SuiteRecord, *, total_seconds: float | None = None,
                   extra: Mapping[str, Any] | None = None) -> str:
    """`timings.json`: seconds per scenario and per stage (varies run to run; never in summary.json)."""
    stages: dict[str, float] = {}
    for s in suite.scenarios:
        for k, v in s.stage_seconds.items():
            stages[k] = stages.get(k, 0.0) + float(v)
    data = {
        "total_seconds": total_seconds,
        "stage_seconds": stages,
        "scenarios": {s.name: {"seconds": s.seconds, "stages": dict(s.stage_seconds)} for s in suite.scenarios},
        **dict(extra or {}),
    }
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


__all__ = ["SUMMARY_FORMAT", "collect_versions", "format_summary", "format_summary_json", "format_timings"]
