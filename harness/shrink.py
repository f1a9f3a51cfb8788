"""Shrink a failing scenario to the fewest model calls that still fail the same audit checks.

Hypothesis drives the search: a candidate keeps the scenario but cuts its steps, prompt groups,
group size and turns per rollout (`st.integers(1, original)` for each, which Hypothesis shrinks
towards 1); `hypothesis.find` returns the smallest candidate whose run still fails with at
least one of the original's audit checks. Runs are cached per candidate, so shrinking costs at
most one run per distinct (steps, groups, group_size, turns).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compactsim.harness.core.errors import ConfigError
from compactsim.harness.runner import RunOptions, ScenarioRun, run_scenario

Knobs = tuple[int, int, int, int]  # (steps, groups, group_size, turns)


def num_turns(scenario: Any) -> int:
    """Model calls one rollout of `scenario` makes (its script's turns)."""
    return int(scenario.script.num_turns)


def num_calls(scenario: Any) -> int:
    """Model calls of the whole scenario: steps × groups × group size × turns (overrides included)."""
    total = 0
    for step in range(scenario.steps):
        for group in range(scenario.groups):
            for index in range(scenario.group_size):
                total += int(scenario.setting("script", group, index, step=step).num_turns)
    return total


def _cut_script(script: dict[str, Any], turns: int) -> dict[str, Any]:
    out = dict(script)
    if out.get("generate") is not None:
        gen = dict(out["generate"])
        gen["turns"] = min(int(gen.get("turns", 4)), turns)
        out["generate"] = gen
    elif out.get("turns"):
        explicit = list(out["turns"])
        if len(explicit) > turns:
            explicit = explicit[: turns - 1] + [explicit[-1]]
        out["turns"] = explicit
    return out


def reduce_scenario(scenario: Any, knobs: Knobs) -> Any | None:
    """`scenario` cut to `knobs`, or None when the cut is not a valid scenario (e.g. drops its mutation target)."""
    from pydantic import ValidationError

    from compactsim.scenarios.model import Scenario

    steps, groups, size, turns = knobs
    data = scenario.to_data()
    data["steps"] = min(scenario.steps, steps)
    data["groups"] = min(scenario.groups, groups)
    data["group_size"] = min(scenario.group_size, size)
    data["script"] = _cut_script(scenario.script.model_dump(mode="json", exclude_defaults=True) or {}, turns)
    if "script" in data and not data["script"]:
        data.pop("script")
    overrides = []
    for o in data.get("rollouts", []):
        if o.get("index", 0) >= data["group_size"] or (o.get("group") is not None and o["group"] >= data["groups"]):
            continue
        if o.get("script"):
            o = {**o, "script": _cut_script(o["script"], turns)}
        overrides.append(o)
    if "rollouts" in data:
        data["rollouts"] = overrides
    if "mask_sample" in data:
        data["mask_sample"] = [i for i in data["mask_sample"] if i < data["group_size"]]
    if "tasks" in data:
        data["tasks"] = data["tasks"][: data["groups"]]
    try:
        return Scenario.model_validate(data)
    except (ValidationError, ConfigError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class ShrinkResult:
    """The original and the minimal failing scenario, with their call counts and the checks that fail."""

    original: Any
    minimal: Any
    calls_before: int
    calls_after: int
    checks: tuple[str, ...]
    runs: int
    minimal_run: ScenarioRun


def failing_checks(run: ScenarioRun) -> frozenset[str]:
    return frozenset(f.check for f in run.record.findings if f.check != "run.harness_error")


def shrink(
    scenario: Any,
    options: RunOptions,
    *,
    max_examples: int = 60,
    runner: Callable[[Any, RunOptions], ScenarioRun] = run_scenario,
) -> ShrinkResult:
    """The fewest-call reduction of `scenario` that still fails one of its original audit checks.

    Raises `ConfigError("invalid_argument")` when `scenario` does not fail to begin with.
    """
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis import strategies as st
    from hypothesis.errors import NoSuchExample

    cache: dict[Knobs, ScenarioRun | None] = {}

    def run_knobs(knobs: Knobs) -> ScenarioRun | None:
        if knobs not in cache:
            cand = reduce_scenario(scenario, knobs)
            cache[knobs] = None if cand is None else runner(cand, options)
        return cache[knobs]

    full: Knobs = (scenario.steps, scenario.groups, scenario.group_size, num_turns(scenario))
    first = run_knobs(full)
    assert first is not None
    target = failing_checks(first)
    if first.record.passed or not target:
        raise ConfigError("invalid_argument", f"scenario {scenario.name!r} passes the audit with backend "
                          f"{options.backend} at seed {scenario.seed}; there is no failure to shrink")

    def still_fails(knobs: Knobs) -> bool:
        run = run_knobs(knobs)
        return run is not None and not run.record.passed and bool(failing_checks(run) & target)

    strategy = st.tuples(*(st.integers(1, n) for n in full))
    try:
        best: Knobs = find(strategy, still_fails, settings=settings(
            database=None, derandomize=True, max_examples=max_examples, deadline=None,
            phases=(Phase.generate, Phase.shrink), suppress_health_check=list(HealthCheck)))
    except NoSuchExample:
        best = full
    # Hypothesis minimises each knob; among the candidates already run, keep the fewest calls.
    failing = [k for k, r in cache.items() if r is not None and still_fails(k)]
    best = min([best, *failing], key=lambda k: (num_calls(reduce_scenario(scenario, k)), k))
    minimal = reduce_scenario(scenario, best)
    assert minimal is not None
    run = run_knobs(best)
    assert run is not None
    return ShrinkResult(
        original=scenario, minimal=minimal, calls_before=num_calls(scenario), calls_after=num_calls(minimal),
        checks=tuple(sorted(failing_checks(run) & target)), runs=sum(1 for r in cache.values() if r is not None),
        minimal_run=run,
    )


def shrunk_entry(result: ShrinkResult, *, name: str | None = None) -> Any:
    """The minimal scenario as a new named catalogue entry (a name and purpose saying where it came from)."""
    from compactsim.scenarios.model import Scenario

    base = result.original.name
    new_name = name or (base[:70] + "-shrunk")
    purpose = (f"Shrunk from {base} (seed {result.original.seed}): {result.calls_after} of {result.calls_before} calls "
               f"still fail {', '.join(result.checks)}.")
    data = {**result.minimal.to_data(), "name": new_name, "purpose": purpose[:240]}
    tags = [t for t in data.get("tags", []) if t != "shrunk"] + ["shrunk"]
    data["tags"] = tags
    return Scenario.model_validate(data)


__all__ = ["ShrinkResult", "failing_checks", "num_calls", "num_turns", "reduce_scenario", "shrink", "shrunk_entry"]
