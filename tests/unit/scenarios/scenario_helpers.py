"""Run a scenario step through agents, the pipeline's planner/materializer and the oracle, and compare rows.

Tests may import both the pipeline and the oracle; the oracle itself never does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.core.errors import ContractError
from compactsim.harness.core.expectations import ExpectedRow, ExpectedStep
from compactsim.harness.oracle import expect_step
from compactsim.harness.pipeline.materializer import materialize
from compactsim.harness.pipeline.planner import plan_rollout
from compactsim.scenarios.build import step_results
from compactsim.scenarios.execute import collect_step
from compactsim.scenarios.model import Scenario

torch.set_num_threads(1)


@dataclass
class StepOutcome:
    """One step seen from both sides."""

    scenario: Scenario
    collected: tuple[Any, ...]
    expected: ExpectedStep
    plans: list[Any]
    batch: TraceBatch | None
    error: ContractError | None

    @property
    def observed_error(self) -> tuple[str, str | None, int | None] | None:
        e = self.error
        return None if e is None else (e.code, e.rollout_id, e.turn_id)

    @property
    def expected_error(self) -> tuple[str, str | None, int | None] | None:
        e = self.expected.error
        return None if e is None else (e.code, e.rollout_id, e.turn_id)


def run_step(scenario: Scenario, step: int = 0) -> StepOutcome:
    """Collect the step in-process, then plan + materialize (pipeline) and expect (oracle)."""
    collected = collect_step(scenario, step)
    expected = expect_step(scenario, step, [c.ground_truth for c in collected])
    plans: list[Any] = []
    batch = None
    error = None
    try:
        # fresh in-process servers: the generation server is at the trainer's start version, 0
        for result in step_results(scenario, step, collected, generation_version=0):
            plans.append(plan_rollout(result))
        batch = materialize(plans, scenario.trainer_config())
    except ContractError as exc:
        error = exc
    return StepOutcome(scenario, collected, expected, plans, batch, error)


def plan_json(outcome: StepOutcome) -> dict[str, list[dict[str, Any]]]:
    """The pipeline's plans as {rollout_id: [trace json...]}."""
    return {p.rollout_id: [t.to_json() for t in p.traces] for p in outcome.plans}


def expected_plan_json(outcome: StepOutcome) -> dict[str, list[dict[str, Any]]]:
    """The oracle's plans in the same shape (trace_index dropped, as `PhysicalTrace.to_json` has none)."""
    out = {}
    for r in outcome.expected.rollouts:
        out[r.rollout_id] = [{k: v for k, v in t.to_json().items() if k != "trace_index"} for t in r.traces]
    return out


def _pixel_digest(pixels: torch.Tensor) -> str:
    """sha256 of (H, W, 3) uint8 RGB, from a (3, H, W) float tensor in [0, 1]."""
    rgb = torch.round(pixels.to(torch.float64) * 255).clamp(0, 255).to(torch.uint8).permute(1, 2, 0).contiguous()
    return hashlib.sha256(rgb.numpy().tobytes()).hexdigest()


def row_differences(expected: Sequence[ExpectedRow], batch: TraceBatch, *, rtol: float = 1e-12) -> list[str]:
    """Every field where the materialised rows differ from the oracle's (empty when they agree)."""
    problems: list[str] = []
    ids = list(batch.row_physical_trace_id)
    real = [i for i in ids if i is not None]
    if sorted(real) != sorted(r.physical_trace_id for r in expected):
        return [f"row ids differ: pipeline {sorted(real)} oracle {sorted(r.physical_trace_id for r in expected)}"]
    for row in expected:
        r = ids.index(row.physical_trace_id)
        where = row.physical_trace_id
        length = int(batch.row_input_lengths[r])
        checks: list[tuple[str, bool]] = [
            ("logical_rollout_id", batch.row_logical_rollout_id[r] == row.logical_rollout_id),
            ("trace_index", int(batch.row_trace_index[r]) == row.trace_index),
            ("input_ids", tuple(batch.row_input_ids[r, :length].tolist()) == row.input_ids),
            ("mask_spans", batch.row_mask_spans[r] == row.mask_spans),
            ("media_ids", batch.row_media_ids[r] == row.media_ids),
            ("sentinel_positions", batch.row_sentinel_positions[r] == row.sentinel_positions),
            ("sample_mask", float(batch.row_sample_mask[r]) == row.sample_mask),
        ]
        mask = torch.zeros(batch.seq_len, dtype=torch.bool)
        pos = list(row.trainable_positions)
        mask[pos] = True
        checks.append(("token_mask", bool(torch.equal(batch.row_token_mask[r] > 0, mask))))
        lp = batch.row_generation_logprobs[r, pos].to(torch.float64).numpy()
        checks.append(("generation_logprobs", bool(np.allclose(lp, row.generation_logprobs, rtol=rtol, atol=0))))
        adv = batch.row_advantages[r].to(torch.float64).numpy()
        want = np.zeros(batch.seq_len)
        want[pos] = row.advantage
        checks.append(("advantages", bool(np.allclose(adv, want, rtol=rtol, atol=1e-12))))
        digests = tuple(_pixel_digest(px) for px in batch.row_pixel_values[r])
        checks.append(("pixel_digests", digests == row.pixel_digests))
        version = int(batch.row_generation_policy_version[r])
        checks.append(("generation_policy_version", version == (-1 if row.generation_policy_version is None
                                                                  else row.generation_policy_version)))
        if row.routes is None:
            checks.append(("routes", batch.routed_experts is None))
        else:
            got = batch.routed_experts
            checks.append(("routes", got is not None and np.array_equal(got[r, :length].numpy(), row.routes)))
        problems += [f"{where}: {name} differs" for name, ok in checks if not ok]
    return problems
