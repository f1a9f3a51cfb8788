"""Declarative metric checks: a tiny, safe grammar parsed into `MetricExpectation`s and evaluated without eval.

Grammar of one scenario entry ``{key: check}``::

    key    := METRIC | FUNC "(" METRIC ")"
    FUNC   := mean | min | max | sum | first | last | all | any
    METRIC := [A-Za-z0-9_./-]+            (a key of compactsim.harness.core.metrics, or any logged metric)
    check  := {equals: x}
            | {max_abs_dev: d, reference: r}        |actual - r| <= d
            | {min: lo} | {max: hi} | {min: lo, max: hi}
            | {between: [lo, hi]}

A bare METRIC is checked on every step's value. `mean`/`min`/`max`/`sum`/`first`/`last` reduce
the per-step values to one number first; `all(m)` / `any(m)` require every / at least one step
to pass. Examples::

    token_mult_prob_error: {max_abs_dev: 1.0e-9, reference: 1.0}
    train/scheduler_increments: {equals: 1}
    mean(token_mult_prob_error): {between: [0.999999, 1.000001]}
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.core.expectations import MetricExpectation
from compactsim.harness.core.metrics import STEP_COUNT_KEYS

AGGREGATES: tuple[str, ...] = ("mean", "min", "max", "sum", "first", "last", "all", "any")
CHECK_KEYS: tuple[str, ...] = ("equals", "max_abs_dev", "reference", "min", "max", "between")
_KEY = re.compile(r"^\s*(?:(?P<fn>[a-z]+)\(\s*(?P<inner>[A-Za-z0-9_./-]+)\s*\)|(?P<bare>[A-Za-z0-9_./-]+))\s*$")


def _number(key: str, field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
        raise ConfigError("invalid_config", f"metrics[{key!r}].{field}={value!r}: expected a finite number")
    return float(value)


def parse_metric_key(key: str) -> tuple[str, str | None]:
    """``"mean(loss)"`` → ``("loss", "mean")``; ``"loss"`` → ``("loss", None)``."""
    m = _KEY.match(key) if isinstance(key, str) else None
    if m is None:
        raise ConfigError("invalid_config", f"metrics key {key!r}: expected METRIC or FUNC(METRIC) with FUNC in {list(AGGREGATES)}")
    if m.group("bare"):
        return m.group("bare"), None
    fn = m.group("fn")
    if fn not in AGGREGATES:
        raise ConfigError("invalid_config", f"metrics key {key!r}: unknown function {fn!r}; expected one of {list(AGGREGATES)}")
    return m.group("inner"), fn


def parse_metric_check(key: str, check: Mapping[str, Any]) -> tuple[MetricExpectation, ...]:
    """The expectations one ``{key: check}`` entry stands for."""
    metric, aggregate = parse_metric_key(key)
    if not isinstance(check, Mapping) or not check:
        raise ConfigError("invalid_config", f"metrics[{key!r}]: expected a non-empty mapping such as {{equals: 1}}")
    unknown = sorted(set(check) - set(CHECK_KEYS))
    if unknown:
        raise ConfigError("invalid_config", f"metrics[{key!r}]: unknown check(s) {unknown}; expected {list(CHECK_KEYS)}")
    out: list[MetricExpectation] = []
    if "equals" in check:
        out.append(MetricExpectation(metric, "equals", value=_number(key, "equals", check["equals"]), aggregate=aggregate))
    if ("max_abs_dev" in check) != ("reference" in check):
        raise ConfigError("invalid_config", f"metrics[{key!r}]: max_abs_dev and reference go together")
    if "max_abs_dev" in check:
        dev = _number(key, "max_abs_dev", check["max_abs_dev"])
        if dev < 0:
            raise ConfigError("invalid_config", f"metrics[{key!r}].max_abs_dev={dev}: expected >= 0")
        out.append(MetricExpectation(metric, "max_abs_dev", value=dev, reference=_number(key, "reference", check["reference"]),
                                     aggregate=aggregate))
    if "min" in check:
        out.append(MetricExpectation(metric, "min", value=_number(key, "min", check["min"]), aggregate=aggregate))
    if "max" in check:
        out.append(MetricExpectation(metric, "max", value=_number(key, "max", check["max"]), aggregate=aggregate))
    if "between" in check:
        pair = check["between"]
        if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
            raise ConfigError("invalid_config", f"metrics[{key!r}].between={pair!r}: expected [low, high]")
        low, high = _number(key, "between[0]", pair[0]), _number(key, "between[1]", pair[1])
        if low > high:
            raise ConfigError("invalid_config", f"metrics[{key!r}].between=[{low}, {high}]: low > high")
        out.append(MetricExpectation(metric, "between", low=low, high=high, aggregate=aggregate))
    return tuple(out)


def parse_metric_expectations(entries: Mapping[str, Mapping[str, Any]]) -> tuple[MetricExpectation, ...]:
    """Every entry of a scenario's `metrics`, in key order then check order."""
    out: list[MetricExpectation] = []
    for key in sorted(entries):
        out += parse_metric_check(key, entries[key])
    return tuple(out)


def passes(expectation: MetricExpectation, value: float) -> bool:
    """Whether one value satisfies the check (NaN never does)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(float(value)):
        return False
    e, v = expectation, float(value)
    if e.kind == "equals":
        return v == e.value
    if e.kind == "max_abs_dev":
        return abs(v - float(e.reference)) <= float(e.value)  # type: ignore[arg-type]
    if e.kind == "min":
        return v >= float(e.value)  # type: ignore[arg-type]
    if e.kind == "max":
        return v <= float(e.value)  # type: ignore[arg-type]
    return float(e.low) <= v <= float(e.high)  # type: ignore[arg-type]


def reduce_values(aggregate: str, values: Sequence[float]) -> float:
    """One number from the per-step values (`mean`, `min`, `max`, `sum`, `first`, `last`)."""
    if not values:
        return math.nan
    if aggregate == "mean":
        return math.fsum(values) / len(values)
    if aggregate == "sum":
        return math.fsum(values)
    if aggregate == "min":
        return min(values)
    if aggregate == "max":
        return max(values)
    if aggregate == "first":
        return values[0]
    if aggregate == "last":
        return values[-1]
    raise ValueError(f"{aggregate!r} is not a reducing aggregate")


@dataclass(frozen=True, slots=True)
class MetricOutcome:
    """One evaluated check: where (step, or None for a run-level check), what was seen, and whether it passed."""

    expectation: MetricExpectation
    step: int | None
    actual: float | None
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"expectation": self.expectation.to_json(), "step": self.step, "actual": self.actual, "ok": self.ok,
                "detail": self.detail}


def describe(expectation: MetricExpectation) -> str:
    """The check as a person reads it, e.g. ``|token_mult_prob_error - 1.0| <= 1e-09``."""
    e, name = expectation, expectation.expression
    if e.kind == "equals":
        return f"{name} == {e.value!r}"
    if e.kind == "max_abs_dev":
        return f"|{name} - {e.reference!r}| <= {e.value!r}"
    if e.kind == "min":
        return f"{name} >= {e.value!r}"
    if e.kind == "max":
        return f"{name} <= {e.value!r}"
    return f"{e.low!r} <= {name} <= {e.high!r}"


def evaluate(
    expectations: Sequence[MetricExpectation], metrics_by_step: Sequence[Mapping[str, Any]]
) -> tuple[MetricOutcome, ...]:
    """Check every expectation against a run's per-step metrics (missing metrics fail, naming the step)."""
    out: list[MetricOutcome] = []
    for e in expectations:
        values: list[tuple[int, float | None]] = [
            (k, float(m[e.metric]) if e.metric in m and m[e.metric] is not None else None)
            for k, m in enumerate(metrics_by_step)
        ]
        if e.aggregate is None or e.aggregate in ("all", "any"):
            per = [(k, v, v is not None and passes(e, v)) for k, v in values]
            if e.aggregate is None:
                for k, v, ok in per:
                    detail = "" if ok else ("metric missing" if v is None else f"{describe(e)} fails: got {v!r}")
                    out.append(MetricOutcome(e, k, v, ok, detail))
                continue
            hits = [ok for _, _, ok in per]
            ok = bool(hits) and (all(hits) if e.aggregate == "all" else any(hits))
            bad = [f"step {k}: {v!r}" for k, v, good in per if not good]
            detail = "" if ok else f"{describe(e)} fails ({'; '.join(bad[:5]) or 'no steps'})"
            out.append(MetricOutcome(e, None, None, ok, detail))
            continue
        present = [v for _, v in values if v is not None]
        missing = [k for k, v in values if v is None]
        if missing or not present:
            out.append(MetricOutcome(e, None, None, False, f"metric {e.metric!r} missing at steps {missing or 'all'}"))
            continue
        actual = reduce_values(e.aggregate, present)
        ok = passes(e, actual)
        out.append(MetricOutcome(e, None, actual, ok, "" if ok else f"{describe(e)} fails: got {actual!r}"))
    return tuple(out)


#: Per-step metrics that count optimizer steps: every step contributes the same count, so their
#: run-level `sum` is proportional to the number of steps a run trains.
STEP_COUNT_METRICS: frozenset[str] = frozenset(STEP_COUNT_KEYS)


def is_step_count(key: str) -> bool:
    """Whether a `metrics` key is a run-level step count (``sum(M)`` of a `STEP_COUNT_METRICS` metric)."""
    metric, aggregate = parse_metric_key(key)
    return aggregate == "sum" and metric in STEP_COUNT_METRICS


def _scaled(value: Any, steps: int, capped: int) -> Any:
    scaled = value * capped / steps
    return int(scaled) if float(scaled).is_integer() else scaled


def scale_step_counts(entries: Mapping[str, Mapping[str, Any]], steps: int, capped: int) -> dict[str, dict[str, Any]]:
    """A scenario's `metrics` entries for a run capped from `steps` to `capped` optimizer steps.

    Step-count expectations (``sum(optimizer_steps) == 20`` in a 20-step scenario) scale
    proportionally — ``== 6`` under ``--steps 6`` — so a capped run of a passing scenario passes;
    tolerances (`max_abs_dev`) do not scale, and every other entry is unchanged. Entries are
    validated first, so a malformed one still fails with its own message.
    """
    if steps < 1 or capped < 1:
        raise ConfigError("invalid_config", f"steps={steps}, capped={capped}: expected positive step counts")
    out: dict[str, dict[str, Any]] = {}
    for key, check in entries.items():
        parse_metric_check(key, check)
        check = dict(check)
        if capped != steps and is_step_count(key):
            for name in ("equals", "min", "max", "reference"):
                if name in check:
                    check[name] = _scaled(check[name], steps, capped)
            if "between" in check:
                check["between"] = [_scaled(v, steps, capped) for v in check["between"]]
        out[key] = check
    return out


def widen_deviations(entries: Mapping[str, Mapping[str, Any]], floor: float) -> dict[str, dict[str, Any]]:
    """A scenario's `metrics` entries for a run in a lower precision: every `max_abs_dev` at least `floor`.

    A deviation a scenario declares for float64 (``token_mult_prob_error`` within 1e-9 of 1) is below
    what float32 arithmetic can hold; `floor` is the audit's metric tolerance for the run's precision.
    Entries are validated first, so a malformed one still fails with its own message.
    """
    out: dict[str, dict[str, Any]] = {}
    for key, check in entries.items():
        parse_metric_check(key, check)
        check = dict(check)
        if "max_abs_dev" in check and check["max_abs_dev"] < floor:
            check["max_abs_dev"] = floor
        out[key] = check
    return out


__all__ = [
    "AGGREGATES",
    "STEP_COUNT_METRICS",
    "is_step_count",
    "scale_step_counts",
    "widen_deviations",
    "CHECK_KEYS",
    "MetricOutcome",
    "describe",
    "evaluate",
    "parse_metric_check",
    "parse_metric_expectations",
    "parse_metric_key",
    "passes",
    "reduce_values",
]
