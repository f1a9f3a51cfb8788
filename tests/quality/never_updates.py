"""Broken backend: computes the loss and gradient but never applies the update (the weights stay put)."""

from __future__ import annotations

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.update"
SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    """Runs the reference step, then puts every parameter back; counters and metrics look normal."""

    name = "never-updates"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        saved = [p.detach().clone() for p in state.policy.parameters()]
        result = super().train_step(state, batch, cfg)
        with torch.no_grad():
            for p, old in zip(state.policy.parameters(), saved, strict=True):
                p.copy_(old)
        return result
