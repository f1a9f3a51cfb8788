"""Run reports: `summary.json` (machine-readable, deterministic), `timings.json` and a self-contained `report.html`."""

from compactsim.harness.report.html import format_report_html, format_suite_table
from compactsim.harness.report.plots import format_metric_plot
from compactsim.harness.report.records import RolloutView, RowView, ScenarioRecord, SuiteRecord, TokenSpan
from compactsim.harness.report.summary import (
    SUMMARY_FORMAT,
    collect_versions,
    format_summary,
    format_summary_json,
    format_timings,
)
from compactsim.harness.report.trace_view import rollout_views

__all__ = [
    "RolloutView",
    "RowView",
    "SUMMARY_FORMAT",
    "ScenarioRecord",
    "SuiteRecord",
    "TokenSpan",
    "collect_versions",
    "format_metric_plot",
    "format_report_html",
    "format_suite_table",
    "format_summary",
    "format_summary_json",
    "format_timings",
    "rollout_views",
]
