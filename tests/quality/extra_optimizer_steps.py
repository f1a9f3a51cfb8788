"""Broken backend: `optimizer.step()` once more for every extra physical row; its own counters left alone."""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "counts.optimizer"
SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    """Counts by physical row under the hood while reporting one step per logical batch."""

    name = "extra-optimizer-steps"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        result = super().train_step(state, batch, cfg)
        for _ in range(batch.num_real_rows - 1):
            state.optimizer.step()  # the gradients are still there: every extra call moves the weights again
        return result
