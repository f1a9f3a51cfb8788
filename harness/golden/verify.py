"""Audit an external trainer's rows dump (and metrics) against golden files, with compactsim's own audit.

The dump's rows of each scenario step become an `ObservedStep` and the goldens' expectation is
decoded back into a `ScenarioExpectation`; `compactsim.harness.audit.audit_run` then compares them exactly
as `compactsim run` does. Rows are matched by physical trace id, real rows are put in id order
and padding rows last, so the order of the dump's lines never matters.

An optional field a line leaves out is *not checked*: the audit sees a placeholder (never the
expected value, so nothing is compared with itself), the findings of that field's check on that
row are dropped, and the report counts the rows per missing field (`ScenarioVerdict.not_checked`).
With ``strict=True`` (`verify --strict`) each such omission is a finding of the field's own
check instead. A rollout whose advantage no row states has its `rollout.advantage` check skipped.
A row's `routed_experts` are compared with the goldens' position by position (its sentinels read from
them, so `routed_experts_sentinel_positions` is then optional, and held to them when stated); a row
without them has its declared sentinel positions checked instead. Two fields are never "not checked":
`sample_mask` defaults to 1.0 on a real row (NeMo-RL's loss multiplier unless `mask_sample`), and
a `generation_policy_version` stated as null is compared (as "unknown") — only a missing key is
an omission.
Without a metrics dump, no metric is checked. Metrics the goldens mark as needing compactsim's
own policy (``expectation.json`` → ``policy_metrics``: `token_mult_prob_error`, loss metrics,
`grad_norm`) are not demanded of an outside trainer: their checks are dropped and the verdict
names them (`ScenarioVerdict.policy_metrics_not_checked`), unless ``require_policy_metrics=True``
(`verify --require-policy-metrics`).

`parent_index` must name the logical rollout in the goldens' trainer order (the batch's canonical
order: group key, rollout index, rollout id — `expectation.json` → ``rollouts[k].parent_index``), so swapped
or out-of-range indices are `row.owner` findings; only a step the goldens do not expect falls
back to the id most rows with that index claim.
"""

from __future__ import annotations

import math
import shlex
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from compactsim.harness.audit import (
    AuditReport,
    Finding,
    ObservedError,
    ObservedLogical,
    ObservedRow,
    ObservedRun,
    ObservedStep,
    Tolerances,
    audit_run,
)
from compactsim.harness.audit.findings import sort_findings
from compactsim.harness.core.expectations import ExpectedRow, ExpectedStep, ScenarioExpectation
from compactsim.harness.golden.reader import Golden, GoldenScenario
from compactsim.harness.golden.rows_dump import DumpRow, MetricsDump, RowsDump, RowsDumpError

#: The audit check that compares each optional field (a missing field's findings are dropped).
FIELD_CHECKS: dict[str, str] = {
    "trace_index": "row.trace_index",
    "rollout_advantage": "rollout.advantage",
    "generation_policy_version": "row.policy_version",
    "media_ids": "row.media",
    "pixel_digests": "row.pixels",
    "routed_experts_sentinel_positions": "row.sentinel",
    "routed_experts": "row.route",
}

#: Optional row fields, in the order `not_checked` reports them.
OPTIONAL_FIELDS: tuple[str, ...] = (
    "trace_index",
    "rollout_advantage",
    "generation_policy_version",
    "media_ids",
    "pixel_digests",
    "routed_experts_sentinel_positions",
    "routed_experts",
)


@dataclass(frozen=True, slots=True, eq=False)
class ScenarioVerdict:
    """The audit of one golden scenario against the dump."""

    name: str
    report: AuditReport
    #: Optional field → number of real rows (rollouts, for rollout_advantage) that left it out.
    not_checked: Mapping[str, int]
    #: Physical trace id → logical rollout id (from the goldens, else the dump), for display.
    rollout_of: Mapping[str, str]
    #: (step, physical trace id) → dump line numbers of rows claiming it.
    lines_of: Mapping[tuple[int, str], tuple[int, ...]]
    reproduce: str
    #: Metrics marked `policy_metrics` whose checks were dropped (no --require-policy-metrics), sorted.
    policy_metrics_not_checked: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.report.passed

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self.report.findings

    def rollout(self, finding: Finding) -> str | None:
        """The logical rollout a finding is about (via its row), when it names a row."""
        return None if finding.row is None else self.rollout_of.get(finding.row)

    def dump_lines(self, finding: Finding) -> tuple[int, ...]:
        if finding.row is None or finding.step is None:
            return ()
        return self.lines_of.get((finding.step, finding.row), ())

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.name,
            "passed": self.passed,
            "expected": self.report.expected,
            "observed": self.report.observed,
            "steps_audited": self.report.steps_audited,
            "rows_audited": self.report.rows_audited,
            "tokens_audited": self.report.tokens_audited,
            "not_checked": dict(self.not_checked),
            "policy_metrics_not_checked": list(self.policy_metrics_not_checked),
            "reproduce": self.reproduce,
            "findings": [
                {**f.to_json(), "rollout": self.rollout(f), "dump_lines": list(self.dump_lines(f))}
                for f in self.findings
            ],
        }


@dataclass(frozen=True, slots=True, eq=False)
class VerifyReport:
    """Every audited scenario's verdict."""

    golden: str
    dump: str
    metrics: str | None
    scenarios: tuple[ScenarioVerdict, ...]

    @property
    def passed(self) -> bool:
        return all(s.passed for s in self.scenarios)

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(f for s in self.scenarios for f in s.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "golden": self.golden,
            "dump": self.dump,
            "metrics": self.metrics,
            "passed": self.passed,
            "findings": len(self.findings),
            "scenarios": [s.to_json() for s in self.scenarios],
        }


# ------------------------------------------------------------------------------------- observed


def _choose_id(claims: Sequence[str | None]) -> str | None:
    """The id most rows claim (ties: the smallest); None when no row names one."""
    counts = Counter(c for c in claims if c is not None)
    if not counts:
        return None
    top = max(counts.values())
    return min(c for c, n in counts.items() if n == top)


@dataclass(frozen=True, slots=True)
class Omission:
    """An optional field one real row (or, for rollout_advantage, one rollout) of the dump left out."""

    step: int
    field: str
    #: Physical trace id of the row, or the logical rollout id for rollout_advantage.
    target: str
    expected: Any


#: Placeholders the audit sees for an omitted field: never the expected value.
_UNSET_INT = -1
_UNSET_FLOAT = math.nan
#: A real row without `sample_mask` is read with this default (it has one; the other optional fields do not).
_DEFAULT_SAMPLE_MASK = 1.0


def _observed_row(
    index: int, row: DumpRow, want: ExpectedRow | None, omitted: list[Omission], step: int
) -> ObservedRow:
    def pick(name: str, value: Any, placeholder: Any, expected: Any) -> Any:
        if value is not None:
            return value
        if want is not None:
            omitted.append(Omission(step, name, want.physical_trace_id, expected))
        return placeholder

    if row.is_padding:
        return ObservedRow(
            row_index=index, physical_trace_id=row.physical_trace_id, logical_rollout_id=row.logical_rollout_id,
            parent_index=-1, trace_index=-1 if row.trace_index is None else row.trace_index,
            input_ids=row.input_ids, length=row.length, token_mask=row.token_mask,
            generation_logprobs=row.generation_logprobs, advantages=row.advantages,
            sample_mask=0.0 if row.sample_mask is None else row.sample_mask,
        )
    wants_version = want is not None and want.generation_policy_version is not None
    if row.generation_policy_version is not None:
        version = row.generation_policy_version
    elif row.states_version or not wants_version:  # a stated null is an answer ("unknown"), compared as such
        version = _UNSET_INT
    else:
        version = pick("generation_policy_version", None, _UNSET_INT, want.generation_policy_version if want else None)
    return ObservedRow(
        row_index=index,
        physical_trace_id=row.physical_trace_id,
        logical_rollout_id=row.logical_rollout_id,
        parent_index=row.parent_index,
        trace_index=pick("trace_index", row.trace_index, _UNSET_INT, want.trace_index if want else None),
        input_ids=row.input_ids,
        length=row.length,
        token_mask=row.token_mask,
        generation_logprobs=row.generation_logprobs,
        advantages=row.advantages,
        # absent: NeMo-RL's default loss multiplier 1, so a trainer that ignores mask_sample is still caught
        sample_mask=_DEFAULT_SAMPLE_MASK if row.sample_mask is None else row.sample_mask,
        media_ids=pick("media_ids", row.media_ids, (), want.media_ids if want else None),
        pixel_digests=pick("pixel_digests", row.pixel_digests, (), want.pixel_digests if want else None),
        # with routes, the sentinels are read from them (a stated list is still held to them): never "not checked"
        declared_sentinel_positions=(pick("routed_experts_sentinel_positions", row.sentinel_positions, (),
                                          want.sentinel_positions if want else None) if row.routes is None
                                     else row.sentinel_positions or ()),
        routes=_routes(row, want, omitted, step),
        generation_policy_version=version,
    )


def _routes(row: DumpRow, want: ExpectedRow | None, omitted: list[Omission], step: int) -> Any:
    """The row's dumped routes; an omission when the goldens have routes for it (then its sentinels are checked as declared)."""
    if row.routes is None and want is not None and want.routes is not None:
        omitted.append(Omission(step, "routed_experts", want.physical_trace_id, list(want.routes.shape)))
    return row.routes


def _stated_advantage(rows: Sequence[DumpRow], rollout_id: str, expected: float | None = None) -> float | None:
    """The rollout advantage the rows of `rollout_id` state, or None when none does.

    Every row states it (one per physical trace), so each is checked: against the goldens' `expected`, the value
    furthest from it (any wrong row is the rollout's finding; NaN is furthest); without one, the value of the
    smallest trace id.
    """
    stated = sorted((str(r.physical_trace_id), float(r.rollout_advantage)) for r in rows
                    if r.logical_rollout_id == rollout_id and r.rollout_advantage is not None)
    if not stated:
        return None
    if expected is None:
        return stated[0][1]

    def distance(value: float) -> float:
        if value == expected:
            return 0.0
        return math.inf if math.isnan(value) else abs(value - expected)

    return max(stated, key=lambda entry: distance(entry[1]))[1]  # the first, smallest trace id, among equals


def _logical(
    step: int, real: Sequence[DumpRow], expected: ExpectedStep | None, omitted: list[Omission]
) -> tuple[ObservedLogical, ...]:
    """The step's logical rollouts indexed by `parent_index`: the goldens' trainer order when they have the step."""
    if expected is not None and expected.rollouts:
        out = []
        for k, want in enumerate(expected.rollouts):
            advantage = _stated_advantage(real, want.rollout_id, want.advantage)
            if advantage is None:
                if want.advantage is not None and want.error is None:
                    omitted.append(Omission(step, "rollout_advantage", want.rollout_id, want.advantage))
                advantage = _UNSET_FLOAT
            out.append(ObservedLogical(index=k, rollout_id=want.rollout_id, advantage=advantage))
        return tuple(out)
    by_parent: dict[int, list[DumpRow]] = {}
    for row in real:
        if row.parent_index < 2 * len(real) + 1:
            by_parent.setdefault(row.parent_index, []).append(row)
    fallback: list[ObservedLogical] = []
    for k in range(max(by_parent, default=-1) + 1):
        rid = _choose_id([r.logical_rollout_id for r in by_parent.get(k, [])])
        if rid is None:
            fallback.append(ObservedLogical(index=k, rollout_id=f"<no row has parent_index {k}>", advantage=math.nan))
            continue
        advantage = _stated_advantage(by_parent[k], rid)
        fallback.append(ObservedLogical(index=k, rollout_id=rid, advantage=math.nan if advantage is None else advantage))
    return tuple(fallback)


def _content_order(row: DumpRow) -> tuple[Any, ...]:
    """Sort key of a real row: its id, then its content (two rows claiming one id keep one order in any dump)."""
    return (str(row.physical_trace_id), row.input_ids.tobytes(), row.token_mask.tobytes(),
            row.generation_logprobs.tobytes(), row.advantages.tobytes(), row.line)


def observed_step(
    step: int,
    rows: Sequence[DumpRow],
    expected: ExpectedStep | None,
    *,
    dp_size: int,
    micro_batch_size: int,
    metrics: Mapping[str, float] | None,
    omitted: list[Omission],
) -> ObservedStep:
    """The audit's view of one step of the dump (real rows in physical-trace-id order, then padding)."""
    want_rows = {r.physical_trace_id: r for r in (expected.rows if expected else ())}
    real = sorted((r for r in rows if not r.is_padding), key=_content_order)
    padding = sorted((r for r in rows if r.is_padding), key=lambda r: r.line)
    observed = [_observed_row(k, r, want_rows.get(str(r.physical_trace_id)), omitted, step)
                for k, r in enumerate(real)]
    observed += [_observed_row(len(real) + k, r, None, omitted, step) for k, r in enumerate(padding)]
    return ObservedStep(
        step=step,
        rows=tuple(observed),
        logical=_logical(step, real, expected, omitted),
        metrics=dict(metrics or {}),
        dp_size=dp_size,
        micro_batch_size=micro_batch_size,
    )


def without_metrics(expectation: ScenarioExpectation) -> ScenarioExpectation:
    """The same expectation with no metric check (used when no metrics dump is given)."""
    return replace(
        expectation,
        steps=tuple(replace(s, exact_metrics={}, metric_expectations=()) for s in expectation.steps),
        metric_expectations=(),
    )


def marked_policy_metrics(golden: GoldenScenario) -> frozenset[str]:
    """The metrics the goldens mark as needing compactsim's policy (none in goldens without the field)."""
    return frozenset(golden.document.get("policy_metrics") or ())


def without_policy_metrics(
    expectation: ScenarioExpectation, policy: frozenset[str]
) -> tuple[ScenarioExpectation, tuple[str, ...]]:
    """The expectation without any check on a `policy` metric, and the metrics whose checks were dropped."""
    dropped: set[str] = set()

    def keep(metric: str) -> bool:
        if metric in policy:
            dropped.add(metric)
            return False
        return True

    steps = tuple(
        replace(s, exact_metrics={k: v for k, v in s.exact_metrics.items() if keep(k)},
                metric_expectations=tuple(e for e in s.metric_expectations if keep(e.metric)))
        for s in expectation.steps
    )
    run_level = tuple(e for e in expectation.metric_expectations if keep(e.metric))
    return replace(expectation, steps=steps, metric_expectations=run_level), tuple(sorted(dropped))


# ---------------------------------------------------------------------------------------- verify


def verify_scenario(
    golden: GoldenScenario,
    dump: RowsDump,
    metrics: MetricsDump | None,
    *,
    tolerances: Tolerances | None = None,
    reproduce: str = "",
    strict: bool = False,
    require_policy_metrics: bool = False,
) -> ScenarioVerdict:
    """Audit one golden scenario against its rows (and metrics) in the dump.

    `strict`: omissions are findings; `require_policy_metrics`: metrics marked as needing compactsim's
    policy are checked too (an outside trainer cannot compute them, so by default they are not).
    """
    name = golden.name
    expectation = golden.expectation if metrics is not None else without_metrics(golden.expectation)
    policy_skipped: tuple[str, ...] = ()
    if not require_policy_metrics and metrics is not None:
        expectation, policy_skipped = without_policy_metrics(expectation, marked_policy_metrics(golden))
    by_step = {s.step: s for s in expectation.steps}
    rows = dump.rows_of(name)
    omitted: list[Omission] = []
    steps = []
    for step in sorted({r.step for r in rows}):
        steps.append(observed_step(
            step, [r for r in rows if r.step == step], by_step.get(step),
            dp_size=golden.trainer.dp_size, micro_batch_size=golden.trainer.micro_batch_size,
            metrics=None if metrics is None else metrics.get(name, step), omitted=omitted,
        ))
    expectation = _skip_unstated_advantages(expectation, omitted)
    expectation = _skip_unstated_routes(expectation, omitted)
    refused = dump.error_of(name)
    error = None if refused is None else ObservedError(
        code=refused.code, rollout_id=refused.rollout_id, turn_id=refused.turn_id, step=refused.step,
        stage="trainer", message=refused.message or f"dump line {refused.line}",
    )
    if tolerances is not None:
        tol = tolerances
    elif golden.tolerances is not None:
        tol = Tolerances(**golden.tolerances)
    else:
        tol = Tolerances.for_dtype(golden.trainer.precision)
    report = audit_run(expectation, ObservedRun(steps=tuple(steps), error=error), tolerances=tol, reproduce=reproduce)
    report = _drop_unchecked(report, omitted, reproduce=reproduce, strict=strict)
    if metrics is not None:
        report = _metrics_beyond_the_steps(report, metrics, name, sorted(s.step for s in golden.expectation.steps),
                                           reproduce=reproduce)
    if not rows and refused is None:
        report = _say_no_lines(report)
    missing = Counter(o.field for o in omitted)
    rollout_of: dict[str, str] = {}
    for r in rows:
        if r.physical_trace_id is not None and r.logical_rollout_id is not None:
            rollout_of.setdefault(r.physical_trace_id, r.logical_rollout_id)
    for s in expectation.steps:
        rollout_of.update({r.physical_trace_id: r.logical_rollout_id for r in s.rows})
    lines: dict[tuple[int, str], list[int]] = {}
    for r in rows:
        if r.physical_trace_id is not None:
            lines.setdefault((r.step, r.physical_trace_id), []).append(r.line)
    return ScenarioVerdict(
        name=name,
        report=report,
        not_checked={f: missing[f] for f in OPTIONAL_FIELDS if missing[f]},
        rollout_of=rollout_of,
        lines_of={k: tuple(sorted(v)) for k, v in lines.items()},
        reproduce=reproduce,
        policy_metrics_not_checked=policy_skipped,
    )


def _metrics_beyond_the_steps(report: AuditReport, metrics: MetricsDump, name: str, steps: Sequence[int], *,
                              reproduce: str) -> AuditReport:
    """A `steps.count` finding per metrics line for a step the goldens do not have: a trainer reporting a step
    that never happened is wrong like a row at that step, not a line to ignore."""
    extra = [Finding(scenario=report.scenario, step=step, check="steps.count", row=None, position=None,
                     expected=len(steps), actual=step, reproduce=reproduce,
                     message=f"the metrics dump has a line for step {step} ({metrics.source} line {line}); the goldens "
                             f"have {len(steps)} step(s){': ' + ', '.join(map(str, steps)) if steps else ''}")
             for (scenario, step), line in sorted(metrics.lines.items()) if scenario == name and step not in steps]
    return replace(report, findings=sort_findings([*report.findings, *extra])) if extra else report


def _say_no_lines(report: AuditReport) -> AuditReport:
    """A scenario the dump never mentions: say so, instead of "0 optimizer steps trained" or "the run succeeded"."""
    absent = f"the dump has no line for scenario {report.scenario!r} (no row, no error line)"

    def said(f: Finding) -> Finding:
        if f.check == "steps.count":
            return replace(f, message=f"{absent}; the goldens expect {f.expected} training step(s)")
        if f.check == "verdict.expected_error" and isinstance(f.expected, Mapping):
            e = f.expected
            return replace(f, message=f"{absent}; the goldens expect it refused with {e.get('code')} "
                                      f"(rollout {e.get('rollout_id')!r}, turn {e.get('turn_id')})")
        return f

    return replace(report, findings=tuple(said(f) for f in report.findings))


def _skip_unstated_advantages(expectation: ScenarioExpectation, omitted: Sequence[Omission]) -> ScenarioExpectation:
    """The expectation with no advantage for rollouts whose advantage the dump never states (check skipped)."""
    return _unset(expectation, omitted, "rollout_advantage", lambda st, skip: replace(st, rollouts=tuple(
        replace(r, advantage=None) if (st.step, r.rollout_id) in skip else r for r in st.rollouts)))


def _skip_unstated_routes(expectation: ScenarioExpectation, omitted: Sequence[Omission]) -> ScenarioExpectation:
    """The expectation without route tensors for rows whose routes the dump omits.

    Those rows' sentinels are then checked as the dump declares them, exactly as for goldens
    without routes, instead of the whole row being reported as trained without replay.
    """
    return _unset(expectation, omitted, "routed_experts", lambda st, skip: replace(st, rows=tuple(
        replace(r, routes=None) if (st.step, r.physical_trace_id) in skip else r for r in st.rows)))


def _unset(expectation: ScenarioExpectation, omitted: Sequence[Omission], field: str,
           edit: Callable[[ExpectedStep, set[tuple[int, str]]], ExpectedStep]) -> ScenarioExpectation:
    """`expectation` with `edit(step, skip)` applied to every step; `skip`: the (step, target) omitting `field`."""
    skip = {(o.step, o.target) for o in omitted if o.field == field}
    if not skip:
        return expectation
    return replace(expectation, steps=tuple(edit(st, skip) for st in expectation.steps))


def _drop_unchecked(report: AuditReport, omitted: Sequence[Omission], *, reproduce: str, strict: bool) -> AuditReport:
    """Findings of an omitted field's check on that row removed; under `strict`, one finding per omission instead."""
    unchecked = {(o.step, o.target, FIELD_CHECKS[o.field]) for o in omitted if o.field != "rollout_advantage"}
    kept = [f for f in report.findings if (f.step, f.row, f.check) not in unchecked]
    if strict:
        for o in omitted:
            row = None if o.field == "rollout_advantage" else o.target
            what = f"logical rollout {o.target!r}" if row is None else "the row"
            kept.append(Finding(
                scenario=report.scenario, step=o.step, check=FIELD_CHECKS[o.field], row=row, position=None,
                expected=o.expected, actual=None, reproduce=reproduce,
                message=f"{o.field} is absent from the dump for {what}; --strict requires every optional field",
            ))
    return replace(report, findings=sort_findings(kept))


def verify_reproduce(golden_dir: str, dump_path: str, metrics_path: str | None, scenario: str, *,
                     require_policy_metrics: bool = False) -> str:
    """The command that re-audits one scenario."""
    parts = ["compactsim", "verify", golden_dir, dump_path]
    if metrics_path:
        parts += ["--metrics", metrics_path]
    if require_policy_metrics:
        parts.append("--require-policy-metrics")
    return shlex.join([*parts, "--scenario", scenario])


def verify_dump(
    golden: Golden,
    dump: RowsDump,
    metrics: MetricsDump | None = None,
    *,
    tolerances: Tolerances | None = None,
    reproduce: Callable[[str], str] | None = None,
    strict: bool = False,
    require_policy_metrics: bool = False,
) -> VerifyReport:
    """Audit every scenario `golden` holds against `dump` (a dump line for a scenario the goldens lack is malformed)."""
    known = {e.name for e in golden.manifest.scenarios}
    for row in dump.rows:
        if row.scenario not in known:
            raise RowsDumpError(dump.source, row.line, "scenario", f"{row.scenario!r} is not in the goldens at "
                                f"{golden.directory}")
    for err in dump.errors:
        if err.scenario not in known:
            raise RowsDumpError(dump.source, err.line, "scenario", f"{err.scenario!r} is not in the goldens at "
                                f"{golden.directory}")
    metrics_source = None if metrics is None else metrics.source
    if metrics is not None:
        for (scenario, _), line in sorted(metrics.lines.items(), key=lambda kv: kv[1]):
            if scenario not in known:
                raise RowsDumpError(metrics.source, line, "scenario",
                                    f"{scenario!r} is not in the goldens at {golden.directory}")
    make = reproduce or (lambda name: verify_reproduce(str(golden.directory), dump.source, metrics_source, name,
                                                       require_policy_metrics=require_policy_metrics))
    verdicts = tuple(
        verify_scenario(g, dump, metrics, tolerances=tolerances, reproduce=make(g.name), strict=strict,
                        require_policy_metrics=require_policy_metrics)
        for g in golden.scenarios
    )
    return VerifyReport(golden=str(golden.directory), dump=dump.source, metrics=metrics_source, scenarios=verdicts)


__all__ = [
    "FIELD_CHECKS",
    "OPTIONAL_FIELDS",
    "Omission",
    "ScenarioVerdict",
    "VerifyReport",
    "marked_policy_metrics",
    "observed_step",
    "verify_dump",
    "verify_reproduce",
    "verify_scenario",
    "without_metrics",
    "without_policy_metrics",
]
