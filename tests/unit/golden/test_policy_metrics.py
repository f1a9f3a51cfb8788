"""Metrics that need compactsim's own policy: marked in the goldens, demanded only with --require-policy-metrics."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from compactsim.harness.core.expectations import MetricExpectation, ScenarioExpectation
from compactsim.harness.golden.codec import expectation_document, json_document, json_lines, step_row_lines
from compactsim.harness.golden.export import POLICY_METRICS, policy_metrics, write_golden
from compactsim.harness.golden.manifest import ScenarioEntry, build_manifest
from compactsim.harness.golden.reader import Golden
from compactsim.harness.golden.rows_dump import format_dump, parse_metrics_dump, parse_rows_dump
from compactsim.harness.golden.schema import validator
from compactsim.harness.golden.verify import verify_dump, without_policy_metrics
from tests.unit.golden.golden_builders import dump_lines, expectation, golden_scenario, trainer

TMPE = "token_mult_prob_error"
#: Every batch metric the toy expectation checks exactly, plus the count a trainer reports.
BATCH = {"physical_trace_training/num_physical_rows": 3, "advantages/sum": 3.0,
         "physical_trace_training/optimizer_steps": 1}


def policy_expectation() -> ScenarioExpectation:
    """The toy expectation plus a per-step and a run-level check on token_mult_prob_error."""
    exp = expectation()
    (step,) = exp.steps
    per_step = (*step.metric_expectations, MetricExpectation(TMPE, "max_abs_dev", value=1e-9, reference=1.0))
    run_level = (MetricExpectation(TMPE, "max_abs_dev", value=1e-9, reference=1.0, aggregate="mean"),)
    return replace(exp, steps=(replace(step, metric_expectations=per_step),), metric_expectations=run_level)


def golden(marked: list[str] | None) -> Golden:
    document: dict[str, Any] = {"steps": []}
    if marked is not None:
        document["policy_metrics"] = marked
    scenario = replace(golden_scenario(policy_expectation()), document=document)
    entries = [ScenarioEntry(scenario.name, "p", (), 7, "success", None, 1, ())]
    manifest = build_manifest({}, entries, seed=7, max_steps=None, selection=[], version="0")
    return Golden(directory=Path("goldens"), manifest=manifest, scenarios=(scenario,))


def verify(g: Golden, metrics: dict[str, float] | None, **kw: Any):
    dump = parse_rows_dump(format_dump(dump_lines(policy_expectation())), source="rows.jsonl")
    m = None if metrics is None else parse_metrics_dump(
        format_dump([{"scenario": "toy", "step": 0, "metrics": metrics}]), source="metrics.jsonl")
    return verify_dump(g, dump, m, **kw)


def checks(report: Any) -> list[tuple[str, Any, Any]]:
    return [(f.check, f.expected, f.actual) for f in report.findings]


def test_policy_metrics_names_each_checked_policy_metric_once_sorted():
    exp = policy_expectation()
    exp = replace(exp, metric_expectations=(*exp.metric_expectations, MetricExpectation("loss", "max", value=9.0)))
    assert policy_metrics(exp) == ["loss", TMPE]
    assert policy_metrics(expectation()) == ["loss"]  # the toy's run-level mean(loss) check
    assert policy_metrics(replace(expectation(), metric_expectations=())) == []


def test_policy_metrics_cover_the_loss_metrics_that_need_a_forward_pass():
    loss = pytest.importorskip("compactsim.harness.pipeline.loss")
    # num_valid_samples counts sample_mask: a trainer computes it from the rows alone
    assert set(loss.METRIC_KEYS) - POLICY_METRICS == {"num_valid_samples"}
    assert POLICY_METRICS - set(loss.METRIC_KEYS) == {"grad_norm"}


def test_expectation_schema_accepts_the_marking_and_refuses_a_malformed_one():
    exp = policy_expectation()
    doc = expectation_document(exp, purpose="p", trainer=trainer(), payloads=[[]],
                               tolerances={k: 0.0 for k in ("advantage_atol", "advantage_rtol", "logprob_atol",
                                                            "logprob_rtol", "metric_atol", "metric_rtol")})
    v = validator("expectation")
    assert list(v.iter_errors({**doc, "policy_metrics": policy_metrics(exp)})) == []
    assert list(v.iter_errors(doc)) == []  # older goldens have no marking
    bad = [e.message for e in v.iter_errors({**doc, "policy_metrics": [TMPE, TMPE]})]
    assert bad == ["['token_mult_prob_error', 'token_mult_prob_error'] has non-unique elements"]


def test_marked_policy_metric_is_not_demanded_and_the_verdict_names_it():
    report = verify(golden([TMPE]), BATCH)
    assert checks(report) == []
    (v,) = report.scenarios
    assert v.policy_metrics_not_checked == (TMPE,)
    assert v.to_json()["policy_metrics_not_checked"] == [TMPE]


def test_require_policy_metrics_demands_the_marked_metric_at_the_step_and_over_the_run():
    report = verify(golden([TMPE]), BATCH, require_policy_metrics=True)
    assert [(f.check, f.step, f.expected["aggregate"] if f.expected.get("aggregate") else None)
            for f in report.findings] == [("metric.missing", None, "mean"), ("metric.missing", 0, None)]
    assert report.scenarios[0].policy_metrics_not_checked == ()
    assert report.scenarios[0].reproduce == ("compactsim verify goldens rows.jsonl --metrics metrics.jsonl "
                                             "--require-policy-metrics --scenario toy")


def test_require_policy_metrics_checks_the_value():
    report = verify(golden([TMPE]), {**BATCH, TMPE: 1.5}, require_policy_metrics=True)
    assert [c for c, _, _ in checks(report)] == ["metric.expectation", "metric.expectation"]
    assert checks(report)[0][2] == 1.5
    assert checks(verify(golden([TMPE]), {**BATCH, TMPE: 1.0}, require_policy_metrics=True)) == []


def test_unmarked_goldens_demand_every_metric_as_before():
    report = verify(golden(None), BATCH)
    assert [c for c, _, _ in checks(report)] == ["metric.missing", "metric.missing"]
    assert report.scenarios[0].policy_metrics_not_checked == ()


def test_marking_never_drops_a_batch_metric():
    report = verify(golden([TMPE]), {**BATCH, "advantages/sum": 4.0})
    assert checks(report) == [("metric.exact", 3.0, 4.0)]


def test_without_a_metrics_dump_nothing_is_reported_as_skipped():
    report = verify(golden([TMPE]), None)
    assert checks(report) == [] and report.scenarios[0].policy_metrics_not_checked == ()


def test_without_policy_metrics_drops_step_exact_and_run_level_checks():
    exp = policy_expectation()
    (step,) = exp.steps
    exp = replace(exp, steps=(replace(step, exact_metrics={**step.exact_metrics, "grad_norm": 2.0}),))
    kept, dropped = without_policy_metrics(exp, frozenset({TMPE, "grad_norm"}))
    assert dropped == ("grad_norm", TMPE)
    assert [e.metric for e in kept.steps[0].metric_expectations] == ["physical_trace_training/optimizer_steps"]
    assert sorted(kept.steps[0].exact_metrics) == ["advantages/sum", "physical_trace_training/num_physical_rows"]
    assert kept.metric_expectations == ()


def _write_golden_dir(out: Path) -> None:
    """A one-scenario golden directory on disk whose expectation marks token_mult_prob_error."""
    exp = policy_expectation()
    tolerances = {k: 0.0 for k in ("advantage_atol", "advantage_rtol", "logprob_atol", "logprob_rtol")}
    tolerances |= {"metric_atol": 1e-9, "metric_rtol": 1e-9}
    doc = expectation_document(exp, purpose="p", trainer=trainer(), payloads=[[]], tolerances=tolerances)
    doc["policy_metrics"] = policy_metrics(exp)
    (step,) = exp.steps
    files = {
        "scenarios/toy/expectation.json": json_document(doc),
        "scenarios/toy/scenario.json": json_document({"name": "toy"}),
        "scenarios/toy/rows/step-0000.jsonl": json_lines(step_row_lines("toy", step, trainer())),
    }
    entries = [ScenarioEntry("toy", "p", (), 7, "success", None, 1, ())]
    write_golden(out, files, build_manifest(files, entries, seed=7, max_steps=None, selection=[], version="0"))


def test_verify_command_flag(tmp_path: Path):
    from compactsim.harness.cli import app

    _write_golden_dir(tmp_path / "g")
    (tmp_path / "rows.jsonl").write_text(format_dump(dump_lines(policy_expectation())), encoding="utf-8")
    (tmp_path / "m.jsonl").write_text(json.dumps({"scenario": "toy", "step": 0, "metrics": BATCH}) + "\n",
                                      encoding="utf-8")
    args = ["verify", str(tmp_path / "g"), str(tmp_path / "rows.jsonl"), "--metrics", str(tmp_path / "m.jsonl"),
            "--json"]
    plain = CliRunner().invoke(app, args)
    assert plain.exit_code == 0, plain.output
    assert json.loads(plain.stdout)["scenarios"][0]["policy_metrics_not_checked"] == [TMPE]
    strict = CliRunner().invoke(app, [*args, "--require-policy-metrics"])
    assert strict.exit_code == 1
    found = json.loads(strict.stdout)["scenarios"][0]["findings"]
    assert [f["check"] for f in found] == ["metric.missing", "metric.missing"]
