"""The declarative metric grammar: parsing, every error, and evaluation per step and over steps."""

from __future__ import annotations

import math

import pytest

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.expectations import MetricExpectation
from compactsim.scenarios.metric_expectations import describe, evaluate, parse_metric_check, parse_metric_expectations, passes, reduce_values


def test_parse_turns_each_check_into_one_expectation():
    exps = parse_metric_expectations({
        "token_mult_prob_error": {"max_abs_dev": 1e-9, "reference": 1.0},
        "physical_trace_training/scheduler_step_increment": {"equals": 1},
        "mean(loss)": {"min": 0, "max": 2},
        "all(grad_norm)": {"between": [0, 10]},
    })
    assert [e.to_json() for e in exps] == [
        {"metric": "grad_norm", "kind": "between", "low": 0.0, "high": 10.0, "aggregate": "all"},
        {"metric": "loss", "kind": "min", "value": 0.0, "aggregate": "mean"},
        {"metric": "loss", "kind": "max", "value": 2.0, "aggregate": "mean"},
        {"metric": "physical_trace_training/scheduler_step_increment", "kind": "equals", "value": 1.0},
        {"metric": "token_mult_prob_error", "kind": "max_abs_dev", "value": 1e-9, "reference": 1.0},
    ]
    assert [e.expression for e in exps][:2] == ["all(grad_norm)", "mean(loss)"]


@pytest.mark.parametrize(
    ("key", "check", "message"),
    [
        ("median(loss)", {"equals": 1}, "unknown function 'median'"),
        ("loss; rm -rf", {"equals": 1}, "expected METRIC or FUNC(METRIC)"),
        ("mean(mean(loss))", {"equals": 1}, "expected METRIC or FUNC(METRIC)"),
        ("loss", {}, "expected a non-empty mapping"),
        ("loss", {"equals": "one"}, "metrics['loss'].equals='one': expected a finite number"),
        ("loss", {"equals": True}, "expected a finite number"),
        ("loss", {"equals": math.inf}, "expected a finite number"),
        ("loss", {"max_abs_dev": 1e-3}, "max_abs_dev and reference go together"),
        ("loss", {"max_abs_dev": -1, "reference": 0}, "expected >= 0"),
        ("loss", {"between": [2, 1]}, "low > high"),
        ("loss", {"between": 3}, "expected [low, high]"),
        ("loss", {"below": 1}, "unknown check(s) ['below']"),
    ],
)
def test_bad_checks_are_config_errors_naming_the_key(key, check, message):
    with pytest.raises(ConfigError) as info:
        parse_metric_check(key, check)
    assert info.value.code == "invalid_config" and message in str(info.value)


def test_passes_applies_each_kind_and_never_accepts_nan():
    assert passes(MetricExpectation("m", "equals", value=1.0), 1)
    assert passes(MetricExpectation("m", "max_abs_dev", value=1e-9, reference=1.0), 1.0 + 5e-10)
    assert not passes(MetricExpectation("m", "max_abs_dev", value=1e-9, reference=1.0), 1.0 + 2e-9)
    assert passes(MetricExpectation("m", "min", value=0.0), 0.0) and not passes(MetricExpectation("m", "max", value=0.0), 0.1)
    assert passes(MetricExpectation("m", "between", low=0.0, high=1.0), 1.0)
    assert not passes(MetricExpectation("m", "min", value=0.0), math.nan)


def test_reduce_values_for_each_aggregate():
    values = [3.0, 1.0, 2.0]
    assert [reduce_values(f, values) for f in ("mean", "sum", "min", "max", "first", "last")] == [2.0, 6.0, 1.0, 3.0, 3.0, 2.0]
    assert math.isnan(reduce_values("mean", []))
    with pytest.raises(ValueError):
        reduce_values("all", values)


def test_evaluate_checks_each_step_aggregates_and_reports_missing_metrics():
    steps = [{"tmpe": 1.0, "inc": 1}, {"tmpe": 1.5, "inc": 1}]
    exps = parse_metric_expectations({
        "tmpe": {"max_abs_dev": 0.1, "reference": 1.0},
        "mean(tmpe)": {"max": 1.5},
        "all(inc)": {"equals": 1},
        "any(tmpe)": {"min": 1.4},
        "sum(absent)": {"equals": 0},
        "grad": {"min": 0},
    })
    out = {(o.expectation.expression, o.step): o for o in evaluate(exps, steps)}
    assert out[("tmpe", 0)].ok and not out[("tmpe", 1)].ok
    assert out[("tmpe", 1)].detail == "|tmpe - 1.0| <= 0.1 fails: got 1.5"
    assert out[("mean(tmpe)", None)].ok and out[("mean(tmpe)", None)].actual == 1.25
    assert out[("all(inc)", None)].ok and out[("any(tmpe)", None)].ok
    assert not out[("sum(absent)", None)].ok and "metric 'absent' missing" in out[("sum(absent)", None)].detail
    assert not out[("grad", 0)].ok and out[("grad", 0)].detail == "metric missing"
    failing_all = evaluate(parse_metric_expectations({"all(tmpe)": {"equals": 1}}), steps)[0]
    assert not failing_all.ok and failing_all.detail == "all(tmpe) == 1.0 fails (step 1: 1.5)"
    assert describe(MetricExpectation("x", "between", low=0.0, high=1.0, aggregate="max")) == "0.0 <= max(x) <= 1.0"
