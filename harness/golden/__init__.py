"""Golden files for any trainer: export scenarios with the oracle's expectation, and verify a trainer's rows dump.

    from harness.golden import export_goldens, read_golden, read_rows_dump, verify_dump

Names resolve lazily, so `compactsim schema` and readers of golden files do not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "FORMAT_VERSION": "harness.golden.manifest",
    "GOLDEN_FORMAT": "harness.golden.manifest",
    "SCHEMA_NAMES": "harness.golden.schema",
    "BackendDump": "harness.golden.reference",
    "DumpError": "harness.golden.rows_dump",
    "DumpRow": "harness.golden.rows_dump",
    "ExportResult": "harness.golden.export",
    "ExportedScenario": "harness.golden.export",
    "Golden": "harness.golden.reader",
    "GoldenScenario": "harness.golden.reader",
    "Manifest": "harness.golden.manifest",
    "MetricsDump": "harness.golden.rows_dump",
    "PayloadGroup": "harness.golden.codec",
    "RowsDump": "harness.golden.rows_dump",
    "RowsDumpError": "harness.golden.rows_dump",
    "ScenarioEntry": "harness.golden.manifest",
    "ScenarioVerdict": "harness.golden.verify",
    "TrainerSettings": "harness.golden.codec",
    "VerifyReport": "harness.golden.verify",
    "backend_dump": "harness.golden.reference",
    "batch_dump_lines": "harness.golden.batch_dump",
    "export_goldens": "harness.golden.export",
    "format_dump": "harness.golden.rows_dump",
    "load_schema": "harness.golden.schema",
    "metrics_line": "harness.golden.rows_dump",
    "parse_metrics_dump": "harness.golden.rows_dump",
    "parse_rows_dump": "harness.golden.rows_dump",
    "read_golden": "harness.golden.reader",
    "read_manifest": "harness.golden.manifest",
    "read_metrics_dump": "harness.golden.rows_dump",
    "read_rows_dump": "harness.golden.rows_dump",
    "scenario_golden": "harness.golden.export",
    "schema_text": "harness.golden.schema",
    "validator": "harness.golden.schema",
    "verify_dump": "harness.golden.verify",
    "verify_scenario": "harness.golden.verify",
    "write_golden": "harness.golden.export",
}

__all__ = [
    "FORMAT_VERSION",
    "GOLDEN_FORMAT",
    "SCHEMA_NAMES",
    "BackendDump",
    "DumpError",
    "DumpRow",
    "ExportResult",
    "ExportedScenario",
    "Golden",
    "GoldenScenario",
    "Manifest",
    "MetricsDump",
    "PayloadGroup",
    "RowsDump",
    "RowsDumpError",
    "ScenarioEntry",
    "ScenarioVerdict",
    "TrainerSettings",
    "VerifyReport",
    "backend_dump",
    "batch_dump_lines",
    "export_goldens",
    "format_dump",
    "load_schema",
    "metrics_line",
    "parse_metrics_dump",
    "parse_rows_dump",
    "read_golden",
    "read_manifest",
    "read_metrics_dump",
    "read_rows_dump",
    "scenario_golden",
    "schema_text",
    "validator",
    "verify_dump",
    "verify_scenario",
    "write_golden",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'harness.golden' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
