"""Broken backend: AdamW built with eps 1e-6 instead of torch's (and NeMo-RL's) 1e-8.

In float64 the weights show it; in float32 an entry whose gradient is within float32's own bound
may step anywhere up to 2·lr, and ε moves exactly those entries, so on `float32-graded-group` the
weights alone passed it. The audit reads ε from the optimizer's param groups (`train.update`).
"""

from __future__ import annotations

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.update"
SCENARIO = "float32-graded-group"


class Backend(ReferenceBackend):
    """Sets every param group's eps to 1e-6 before its first step (as a wrong optimizer config would)."""

    name = "adam-eps-1e6"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        for group in state.optimizer.param_groups:
            group["eps"] = 1e-6
        return super().train_step(state, batch, cfg)
