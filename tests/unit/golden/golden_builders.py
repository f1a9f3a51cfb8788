"""Small hand-made expectations, trainer settings and dump lines shared by the golden unit tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from compactsim.harness.core.expectations import (
    ExpectedError,
    ExpectedRollout,
    ExpectedRow,
    ExpectedStep,
    ExpectedTrace,
    MetricExpectation,
    ScenarioExpectation,
)
from compactsim.harness.golden.codec import TrainerSettings, step_row_lines
from compactsim.harness.golden.manifest import ScenarioEntry, build_manifest
from compactsim.harness.golden.reader import Golden, GoldenScenario

DIGEST_A = "a" * 64
DIGEST_B = "b" * 64


def trainer(dp_size: int = 1, micro_batch_size: int = 3) -> TrainerSettings:
    return TrainerSettings(
        num_generations_per_prompt=2, leave_one_out=True, normalize=True, clip_low=None, clip_high=None,
        dp_size=dp_size, micro_batch_size=micro_batch_size, async_mode=False, importance_sampling_correction=False,
        precision="float64",
        config={"grpo": {"num_prompts_per_step": 1, "num_generations_per_prompt": 2},  # what the fields restate
                "policy": {"dp_size": dp_size, "train_micro_batch_size": micro_batch_size, "train_global_batch_size": 2,
                           "precision": "float64"}},
    )


def rows() -> tuple[ExpectedRow, ...]:
    """Rollout r0 split in two traces (a boundary: sentinel at 4), rollout r1 in one."""
    return (
        ExpectedRow(
            physical_trace_id="r0/trace-0", logical_rollout_id="r0", trace_index=0,
            input_ids=(1, 2, 10, 11, 12), mask_spans=((2, 5),), generation_logprobs=(-0.5, -0.25, -1.0),
            advantage=0.75, sample_mask=1.0, media_ids=("m1",), pixel_digests=(DIGEST_A,),
            sentinel_positions=(4,), repaired_positions=(), generation_policy_version=0,
        ),
        ExpectedRow(
            physical_trace_id="r0/trace-1", logical_rollout_id="r0", trace_index=1,
            input_ids=(1, 3, 20, 4, 21, 22), mask_spans=((2, 3), (4, 6)), generation_logprobs=(-0.125, -2.0, -0.5),
            advantage=0.75, sample_mask=1.0, media_ids=("m1", "m2"), pixel_digests=(DIGEST_A, DIGEST_B),
            sentinel_positions=(), repaired_positions=(2,), generation_policy_version=0,
        ),
        ExpectedRow(
            physical_trace_id="r1/trace-0", logical_rollout_id="r1", trace_index=0,
            input_ids=(1, 2, 30, 31), mask_spans=((2, 4),), generation_logprobs=(-0.75, -0.0625),
            advantage=-0.75, sample_mask=1.0, media_ids=(), pixel_digests=(),
            sentinel_positions=(), repaired_positions=(), generation_policy_version=0,
        ),
    )


def rollouts() -> tuple[ExpectedRollout, ...]:
    def trace(rid: str, k: int, turns: tuple[int, ...], n: int, s: int, reason: str) -> ExpectedTrace:
        return ExpectedTrace(f"{rid}/trace-{k}", k, turns, ("m1",), reason, n, s)

    return (
        ExpectedRollout("r0", "g0", 1.0, 0.75, False, 6, "physical",
                        (trace("r0", 0, (1,), 5, 3, "rollout_start"), trace("r0", 1, (2, 3), 6, 3, "declared_boundary"))),
        ExpectedRollout("r1", "g0", 0.0, -0.75, False, 2, "physical", (trace("r1", 0, (1,), 4, 2, "rollout_start"),)),
    )


def expectation() -> ScenarioExpectation:
    step = ExpectedStep(
        step=0, rollouts=rollouts(), rows=rows(),
        exact_metrics={"physical_trace_training/num_physical_rows": 3, "advantages/sum": 3.0},
        metric_expectations=(MetricExpectation("physical_trace_training/optimizer_steps", "equals", value=1.0),),
    )
    return ScenarioExpectation(
        scenario="toy", seed=7, verdict="success", steps=(step,),
        metric_expectations=(MetricExpectation("loss", "max", value=10.0, aggregate="mean"),),
    )


def refused_expectation() -> ScenarioExpectation:
    error = ExpectedError("incomplete_group", "r0", None)
    step = ExpectedStep(step=0, rollouts=rollouts()[:1], rows=(), exact_metrics={}, batch_error=error, error=error)
    return ScenarioExpectation(scenario="toy-refused", seed=7, verdict="error", steps=(step,), error=error)


def golden_scenario(exp: ScenarioExpectation | None = None, settings: TrainerSettings | None = None) -> GoldenScenario:
    exp = exp or expectation()
    return GoldenScenario(name=exp.scenario, directory=Path("/nonexistent"), expectation=exp,
                          trainer=settings or trainer(), document={"steps": []})


def golden(*scenarios: GoldenScenario) -> Golden:
    """An in-memory golden set of `scenarios` (default: the toy scenario), as `read_golden` would return it."""
    scenarios = scenarios or (golden_scenario(),)
    entries = [ScenarioEntry(s.name, "p", (), 7, s.expectation.verdict, None, 1, ()) for s in scenarios]
    manifest = build_manifest({}, entries, seed=7, max_steps=None, selection=[], version="0")
    return Golden(directory=Path("goldens"), manifest=manifest, scenarios=tuple(scenarios))


def dump_lines(exp: ScenarioExpectation | None = None, settings: TrainerSettings | None = None) -> list[dict[str, Any]]:
    """A correct trainer's rows dump of `exp`: the golden row lines without the golden-only field, token_mask form."""
    exp = exp or expectation()
    out = []
    for step in exp.steps:
        for line in step_row_lines(exp.scenario, step, settings or trainer()):
            line = dict(line)
            del line["routed_experts_repaired_positions"]
            spans = line.pop("mask_spans")
            mask = [0] * len(line["input_ids"])
            for s, e in spans:
                mask[s:e] = [1] * (e - s)
            line["token_mask"] = mask
            if line["parent_index"] < 0:
                del line["rollout_advantage"]
            out.append(line)
    return out
