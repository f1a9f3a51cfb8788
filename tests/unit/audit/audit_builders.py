"""A hand-sized expectation and the step artifact a correct trainer writes for it, plus corruption helpers.

One group of two rollouts (rewards 1 and 0, advantages ±1/√2): rollout `r-a` compacted once
(two rows; the first ends on a boundary whose route must be the -1 sentinel and re-owns image
`m2` in the second), rollout `r-b` uncompacted (one row); dp_size 2 × micro_batch_size 1, so
one padding row follows the three real rows. Everything is written out literally.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from compactsim.harness.audit import ObservedRun, observed_from_artifact, rgb_pixel_digest
from compactsim.harness.core import metrics as M
from compactsim.harness.core.artifacts import StepArtifact
from compactsim.harness.core.expectations import (
    ExpectedError,
    ExpectedRollout,
    ExpectedRow,
    ExpectedStep,
    ExpectedTrace,
    MetricExpectation,
    ScenarioExpectation,
)

ADV = 1.0 / math.sqrt(2.0)
S = 14
L, K = 1, 2


def _pixels(value: int) -> np.ndarray:
    return np.full((2, 3, 3), value, dtype=np.uint8)


PIXELS = {"m1": _pixels(10), "m2": _pixels(20), "m3": _pixels(30)}
DIGEST = {k: rgb_pixel_digest(v) for k, v in PIXELS.items()}


def _routes(n: int, seed: int, sentinels: tuple[int, ...] = ()) -> np.ndarray:
    r = np.zeros((n, L, K), dtype=np.int32)
    for p in range(n):
        a = (p * 7 + seed) % 4
        r[p, 0] = (a, (a + 1 + p % 3) % 4)
    for p in sentinels:
        r[p] = -1
    return r


def _row(rid: str, k: int, tokens: list[int], spans: tuple[tuple[int, int], ...], adv: float, media: tuple[str, ...],
         sentinels: tuple[int, ...], repaired: tuple[int, ...], seed: int) -> ExpectedRow:
    positions = [p for s, e in spans for p in range(s, e)]
    return ExpectedRow(
        physical_trace_id=f"{rid}/trace-{k}",
        logical_rollout_id=rid,
        trace_index=k,
        input_ids=tuple(tokens),
        mask_spans=spans,
        generation_logprobs=tuple(-0.125 * (p + 1) - 0.001 * seed for p in positions),
        advantage=adv,
        sample_mask=1.0,
        media_ids=media,
        pixel_digests=tuple(DIGEST[m] for m in media),
        sentinel_positions=sentinels,
        repaired_positions=repaired,
        generation_policy_version=0,
        routes=_routes(len(tokens), seed, sentinels),
    )


ROW_A0 = _row("r-a", 0, [3, 6, 16, 16, 40, 41, 4, 3, 6, 42, 43, 44, 45, 4], ((4, 7), (9, 14)), ADV, ("m1", "m2"),
              (13,), (6,), seed=1)
ROW_A1 = _row("r-a", 1, [3, 6, 16, 16, 50, 51, 52, 4, 3, 53], ((7, 10),), ADV, ("m2", "m3"), (), (), seed=2)
ROW_B0 = _row("r-b", 0, [3, 6, 16, 16, 60, 61, 62, 4, 3, 6, 63, 64], ((4, 8), (10, 12)), -ADV, ("m1",), (), (7,), seed=3)
ROWS = (ROW_A0, ROW_A1, ROW_B0)

EXACT = {
    M.NUM_PHYSICAL_ROWS: 3.0,
    M.NUM_PADDING_ROWS: 1.0,
    M.NUM_LOGICAL_ROLLOUTS: 2.0,
    M.TOTAL_NUM_TOKENS: 36.0,
}
METRICS: dict[str, float | int] = {
    **EXACT,
    M.TOKEN_MULT_PROB_ERROR: 1.0 + 1e-12,
    M.SCHEDULER_STEP_INCREMENT: 1,
    M.OPTIMIZER_STEP_COUNT: 1,
    M.SCHEDULER_STEP_COUNT: 1,
}
EXPECTATIONS = (
    MetricExpectation(M.TOKEN_MULT_PROB_ERROR, "max_abs_dev", value=1e-9, reference=1.0),
    MetricExpectation(M.SCHEDULER_STEP_INCREMENT, "equals", value=1.0),
    MetricExpectation(M.TOKEN_MULT_PROB_ERROR, "between", low=0.999, high=1.001, aggregate="mean"),
)


def expected_step(step: int = 0) -> ExpectedStep:
    rollouts = (
        ExpectedRollout("r-a", "task-0", 1.0, ADV, False, 11, "physical", (
            ExpectedTrace("r-a/trace-0", 0, (1, 2), ("m1", "m2"), "rollout_start", 14, 8),
            ExpectedTrace("r-a/trace-1", 1, (3,), ("m2", "m3"), "declared_boundary", 10, 3),
        )),
        ExpectedRollout("r-b", "task-0", 0.0, -ADV, False, 6, "physical", (
            ExpectedTrace("r-b/trace-0", 0, (1, 2), ("m1",), "rollout_start", 12, 6),
        )),
    )
    return ExpectedStep(step=step, rollouts=rollouts, rows=ROWS, exact_metrics=dict(EXACT),
                        metric_expectations=EXPECTATIONS)


def expectation(steps: int = 1, *, error: ExpectedError | None = None) -> ScenarioExpectation:
    return ScenarioExpectation(
        scenario="audit-fixture", seed=7, verdict="error" if error else "success",
        steps=tuple(expected_step(s) for s in range(steps)), error=error,
    )


def artifact(step: int = 0, order: tuple[int, ...] = (0, 1, 2)) -> StepArtifact:
    """The artifact a correct trainer writes for `expected_step`, real rows in `order` then one padding row."""
    rows = [ROWS[i] for i in order]
    logical = [
        {"index": 0, "rollout_id": "r-a", "group_key": "task-0", "reward": 1.0, "advantage": ADV, "mask_sample": False},
        {"index": 1, "rollout_id": "r-b", "group_key": "task-0", "reward": 0.0, "advantage": -ADV, "mask_sample": False},
    ]
    parent_of = {"r-a": 0, "r-b": 1}
    r = len(rows) + 1
    ids = np.zeros((r, S), np.int32)
    lengths = np.zeros(r, np.int32)
    mask = np.zeros((r, S), np.uint8)
    adv = np.zeros((r, S), np.float64)
    lp = np.zeros((r, S), np.float64)
    routes = np.tile(np.arange(K, dtype=np.int32), (r, S, L, 1))
    for i, row in enumerate(rows):
        n = len(row.input_ids)
        ids[i, :n] = row.input_ids
        lengths[i] = n
        for pos, val in zip(row.trainable_positions, row.generation_logprobs, strict=True):
            mask[i, pos] = 1
            adv[i, pos] = row.advantage
            lp[i, pos] = val
        routes[i, :n] = row.routes
    parents = [parent_of[row.logical_rollout_id] for row in rows] + [-1]
    for rec in logical:
        rec["row_indices"] = [i for i, p in enumerate(parents) if p == rec["index"]]
    arrays = {
        "row_input_ids": ids,
        "row_input_lengths": lengths,
        "row_token_mask": mask,
        "row_sample_mask": np.array([1.0] * len(rows) + [0.0]),
        "row_advantages": adv,
        "row_generation_logprobs": lp,
        "row_prev_logprobs": lp.copy(),
        "parent_indices": np.array(parents, np.int64),
        "row_trace_index": np.array([row.trace_index for row in rows] + [-1], np.int64),
        "row_generation_policy_version": np.array([0] * len(rows) + [-1], np.int64),
        "row_trained_policy_version": np.array([step] * len(rows) + [-1], np.int64),
        "routed_experts": routes,
    }
    return StepArtifact(
        step=step,
        trained_policy_version=step,
        arrays=arrays,
        row_logical_rollout_id=tuple(row.logical_rollout_id for row in rows) + (None,),
        row_physical_trace_id=tuple(row.physical_trace_id for row in rows) + (None,),
        row_mask_spans=tuple(row.mask_spans for row in rows) + ((),),
        row_media_ids=tuple(row.media_ids for row in rows) + ((),),
        row_pixel_digests=tuple(row.pixel_digests for row in rows) + ((),),
        row_sentinel_positions=tuple(row.sentinel_positions for row in rows) + ((),),
        logical=tuple(logical),
        metrics={**METRICS, M.OPTIMIZER_STEP_COUNT: step + 1, M.SCHEDULER_STEP_COUNT: step + 1},
        optimizer_steps=1,
        scheduler_increments=1,
        dp_size=2,
        micro_batch_size=1,
    )


def with_arrays(a: StepArtifact, **arrays: np.ndarray) -> StepArtifact:
    return replace(a, arrays={**a.arrays, **arrays})


def edit(a: StepArtifact, name: str, index: tuple[Any, ...], value: Any) -> StepArtifact:
    """`a` with `arrays[name][index] = value` (on a copy)."""
    arr = a.arrays[name].copy()
    arr[index] = value
    return with_arrays(a, **{name: arr})


def run_of(*artifacts: StepArtifact, **kw: Any) -> ObservedRun:
    return ObservedRun(steps=tuple(observed_from_artifact(a) for a in artifacts), **kw)


def with_metrics(a: StepArtifact, metrics: Mapping[str, float | int]) -> StepArtifact:
    return replace(a, metrics={**a.metrics, **metrics})
