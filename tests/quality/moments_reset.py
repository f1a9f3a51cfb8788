"""Broken backend: AdamW's moments are zeroed before every step (a checkpoint reload that loses optimizer state)."""

from __future__ import annotations

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.update"
SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    """Counters, loss and gradient stay right; only the optimizer's memory is lost, so step 0 is still correct."""

    name = "moments-reset"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        with torch.no_grad():
            for per_param in state.optimizer.state.values():
                for key in ("exp_avg", "exp_avg_sq"):
                    if key in per_param:
                        per_param[key].zero_()
        return super().train_step(state, batch, cfg)
