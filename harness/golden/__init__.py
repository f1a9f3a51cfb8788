"""Golden files for any trainer: export scenarios with the oracle's expectation, and verify a trainer's rows dump.

    from compactsim.harness.golden import export_goldens, read_golden, read_rows_dump, verify_dump

Names resolve lazily, so `compactsim schema` and readers of golden files do not load torch.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "FORMAT_VERSION": "compactsim.harness.golden.manifest",
    "GOLDEN_FORMAT": "compactsim.harness.golden.manifest",
    "SCHEMA_NAMES": "compactsim.harness.golden.schema",
    "BackendDump": "compactsim.harness.golden.reference",
    "DumpError": "compactsim.harness.golden.rows_dump",
    "DumpRow": "compactsim.harness.golden.rows_dump",
    "ExportResult": "compactsim.harness.golden.export",
    "ExportedScenario": "compactsim.harness.golden.export",
    "Golden": "compactsim.harness.golden.reader",
    "GoldenScenario": "compactsim.harness.golden.reader",
    "Manifest": "compactsim.harness.golden.manifest",
    "MetricsDump": "compactsim.harness.golden.rows_dump",
    "PayloadGroup": "compactsim.harness.golden.codec",
    "RowsDump": "compactsim.harness.golden.rows_dump",
    "RowsDumpError": "compactsim.harness.golden.rows_dump",
    "ScenarioEntry": "compactsim.harness.golden.manifest",
    "ScenarioVerdict": "compactsim.harness.golden.verify",
    "TrainerSettings": "compactsim.harness.golden.codec",
    "VerifyReport": "compactsim.harness.golden.verify",
    "backend_dump": "compactsim.harness.golden.reference",
    "batch_dump_lines": "compactsim.harness.golden.batch_dump",
    "export_goldens": "compactsim.harness.golden.export",
    "format_dump": "compactsim.harness.golden.rows_dump",
    "load_schema": "compactsim.harness.golden.schema",
    "metrics_line": "compactsim.harness.golden.rows_dump",
    "parse_metrics_dump": "compactsim.harness.golden.rows_dump",
    "parse_rows_dump": "compactsim.harness.golden.rows_dump",
    "read_golden": "compactsim.harness.golden.reader",
    "read_manifest": "compactsim.harness.golden.manifest",
    "read_metrics_dump": "compactsim.harness.golden.rows_dump",
    "read_rows_dump": "compactsim.harness.golden.rows_dump",
    "scenario_golden": "compactsim.harness.golden.export",
    "schema_text": "compactsim.harness.golden.schema",
    "validator": "compactsim.harness.golden.schema",
    "verify_dump": "compactsim.harness.golden.verify",
    "verify_scenario": "compactsim.harness.golden.verify",
    "write_golden": "compactsim.harness.golden.export",
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
        raise AttributeError(f"module 'compactsim.harness.golden' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
