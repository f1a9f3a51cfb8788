"""Audit a scenario run: every step's trained rows and metrics against the oracle's expectation.

`audit_run` is pure: it takes the oracle's `ScenarioExpectation` and what the trainer did
(`ObservedRun`) and returns an `AuditReport` whose findings name scenario, step, row (physical
trace id), token position, expected and actual values, and the command that reproduces them.
Rows are matched by physical trace id, so any row order gives the same report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compactsim.harness.audit import checks as C
from compactsim.harness.audit import training_checks as T
from compactsim.harness.audit.findings import Finding, reproduce_command, sort_findings
from compactsim.harness.audit.observed import ObservedRun, ObservedStep
from compactsim.harness.core import metrics as M
from compactsim.harness.core.expectations import ExpectedStep, ExpectedTrainingStep, MetricExpectation, ScenarioExpectation


@dataclass(frozen=True, slots=True)
class AuditReport:
    """The verdict on one scenario run."""

    scenario: str
    seed: int
    #: "success" or "error:<code>" — what the scenario must produce.
    expected: str
    #: "success" or "error:<code>" — what the run produced.
    observed: str
    findings: tuple[Finding, ...]
    steps_audited: int
    rows_audited: int
    tokens_audited: int
    reproduce: str

    @property
    def passed(self) -> bool:
        """The run met its expected verdict with no finding."""
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "expected": self.expected,
            "observed": self.observed,
            "passed": self.passed,
            "steps_audited": self.steps_audited,
            "rows_audited": self.rows_audited,
            "tokens_audited": self.tokens_audited,
            "reproduce": self.reproduce,
            "findings": [f.to_json() for f in self.findings],
        }


def audit_step(
    report: C.Reporter, expected: ExpectedStep, observed: ObservedStep, tol: C.Tolerances,
    training: ExpectedTrainingStep | None = None, *, router_replay: bool = False,
) -> tuple[list[Finding], int, int]:
    """Findings of one step, plus the number of rows and tokens compared."""
    findings: list[Finding] = []
    pairs, row_findings = C.match_rows(report, expected.rows, observed)
    findings += row_findings
    tokens = 0
    for want, got in pairs:
        findings += C.check_row_owner(report, want, got, observed)
        findings += C.check_row_tokens(report, want, got)
        findings += C.check_row_mask(report, want, got)
        findings += C.check_row_logprobs(report, want, got, tol)
        findings += C.check_row_advantages(report, want, got, tol)
        findings += C.check_row_sample_mask(report, want, got)
        findings += C.check_row_policy_version(report, want, got)
        findings += C.check_row_images(report, want, got)
        findings += C.check_row_routes(report, want, got, router_replay=router_replay)
        tokens += len(want.input_ids)
    findings += C.check_rollout_advantages(report, expected.rollouts, observed, tol)
    findings += C.check_padding(report, observed, len(expected.rows))
    if observed.measured is None:
        findings += C.check_counts(report, observed)
    else:
        findings += T.check_counts_measured(report, observed.measured, {**observed.metrics, **observed.reported_counts},
                                            training)
        if training is not None:
            step_tol = tol.for_normaliser(training.global_valid_tokens)
            findings += T.check_step_quantities(report, training, observed.measured, observed.metrics, step_tol)
            findings += T.check_reported_loss_metrics(report, training, observed.metrics, step_tol)
            findings += T.check_gradient(report, training, observed.measured, step_tol)
            findings += T.check_update(report, training, observed.measured, step_tol)
    findings += C.check_exact_metrics(report, expected, observed, tol)
    findings += C.check_reported_reward(report, expected.rollouts, observed.metrics, tol)
    return findings, len(pairs), tokens


def run_level_expectations(expectation: ScenarioExpectation) -> tuple[MetricExpectation, ...]:
    """The scenario's run-level expectations plus any aggregate found in a step, each once, in first-seen order."""
    seen: dict[tuple[Any, ...], MetricExpectation] = {}
    candidates = list(expectation.metric_expectations)
    candidates += [e for st in expectation.steps for e in st.metric_expectations if e.aggregate is not None]
    for exp in candidates:
        key = (exp.metric, exp.aggregate, exp.kind, exp.value, exp.low, exp.high, exp.reference)
        seen.setdefault(key, exp)
    return tuple(seen.values())


def _outcome(error: Any) -> str:
    return "success" if error is None else f"error:{error.code}"


def audit_run(
    expectation: ScenarioExpectation,
    observed: ObservedRun,
    *,
    backend: str | None = None,
    tolerances: C.Tolerances | None = None,
    reproduce: str | None = None,
    training: Sequence[ExpectedTrainingStep] = (),
    router_replay: bool = False,
    declared: tuple[str, str | None, int | None] | None = None,
) -> AuditReport:
    """Compare a whole run with the oracle; `backend` ("module:attr") goes into the reproduction command.

    `declared` is the scenario's own `expect` (verdict, code, turn), checked against the oracle's verdict.
    `training` holds the oracle's step truths (`compactsim.harness.oracle.training`) for the steps whose state the
    harness measured; `router_replay` says the trainer had router replay on, so every real row must carry
    its routes.
    """
    tol = tolerances or C.Tolerances()
    cmd = reproduce or reproduce_command(expectation.scenario, expectation.seed, backend=backend)
    rep = C.Reporter(expectation.scenario, None, cmd)
    must_fail = expectation.verdict == "error"
    findings: list[Finding] = []
    if declared is not None:
        findings += C.check_declared_verdict(rep, declared, expectation.error if must_fail else None)
    findings += C.check_error(rep, expectation.error if must_fail else None, observed.error)
    if not must_fail and observed.error is None:
        findings += C.check_step_count(rep, len(expectation.steps), len(observed.steps))
    by_step = {st.step: st for st in observed.steps}
    truths = {t.step: t for t in training}
    rows = tokens = audited = 0
    for exp_step in expectation.steps:
        got = by_step.get(exp_step.step)
        if got is None or exp_step.batch_error is not None or exp_step.error is not None:
            continue  # a step that must be refused is judged by the verdict checks
        step_findings, n_rows, n_tokens = audit_step(rep.at_step(exp_step.step), exp_step, got, tol,
                                                     truths.get(exp_step.step), router_replay=router_replay)
        findings += step_findings
        rows += n_rows
        tokens += n_tokens
        audited += 1
    ordered = sorted(observed.steps, key=lambda s: s.step)
    for prev, cur in zip(ordered, ordered[1:]):
        if prev.measured is not None and cur.measured is not None and cur.step == prev.step + 1:
            findings += T.check_continuity(rep.at_step(cur.step), prev.measured, cur.measured)
    findings += C.check_cumulative_counts(rep, ordered, {
        "counts.optimizer": M.OPTIMIZER_STEP_COUNT,
        "counts.scheduler": M.SCHEDULER_STEP_COUNT,
    })
    if ordered:
        audited_steps = [(e.step, e.metric_expectations) for e in expectation.steps
                         if e.batch_error is None and e.error is None]
        run_level = run_level_expectations(expectation) if observed.error is None else ()
        findings += C.check_metric_expectations(rep, audited_steps, run_level, [(st.step, st.metrics) for st in ordered])
    return AuditReport(
        scenario=expectation.scenario,
        seed=expectation.seed,
        expected=_outcome(expectation.error) if must_fail else "success",
        observed=_outcome(observed.error),
        findings=sort_findings(findings),
        steps_audited=audited,
        rows_audited=rows,
        tokens_audited=tokens,
        reproduce=cmd,
    )


__all__ = ["AuditReport", "audit_run", "audit_step", "run_level_expectations"]
