"""The audit: compare every step a trainer took with the oracle's expectation, row by row and token by token."""

from compactsim.harness.audit.audit import AuditReport, audit_run, audit_step, run_level_expectations
from compactsim.harness.audit.checks import Tolerances
from compactsim.harness.audit.findings import CHECKS, Finding, reproduce_command, sort_findings
from compactsim.harness.audit.observed import (
    ObservedError,
    ObservedLogical,
    ObservedRow,
    ObservedRun,
    ObservedStep,
    observed_from_artifact,
    rgb_pixel_digest,
)

__all__ = [
    "CHECKS",
    "AuditReport",
    "Finding",
    "ObservedError",
    "ObservedLogical",
    "ObservedRow",
    "ObservedRun",
    "ObservedStep",
    "Tolerances",
    "audit_run",
    "audit_step",
    "observed_from_artifact",
    "reproduce_command",
    "rgb_pixel_digest",
    "run_level_expectations",
    "sort_findings",
]
