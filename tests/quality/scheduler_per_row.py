"""Broken backend: the LR scheduler steps once per physical row instead of once per logical batch."""

from __future__ import annotations

from dataclasses import replace

from compactsim.harness.core import metrics as M
from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "counts.scheduler"
SCENARIO = "summary-compaction"  # two rollouts trained as four rows: one scheduler step, not four


class Backend(ReferenceBackend):
    """Steps the scheduler for every extra real row, and records what it did."""

    name = "scheduler-per-row"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        result = super().train_step(state, batch, cfg)
        for _ in range(batch.num_real_rows - 1):
            state.scheduler.step()
        metrics = {**result.metrics, M.SCHEDULER_STEP_COUNT: state.scheduler_steps}
        artifact = replace(result.artifact, metrics=metrics, scheduler_increments=batch.num_real_rows)
        return replace(result, metrics=metrics, artifact=artifact)
