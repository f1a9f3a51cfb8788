"""Broken backend: weight decay coupled into the gradient (`torch.optim.Adam(weight_decay=...)`'s L2) instead of AdamW's.

Adam with L2 adds ``wd·θ`` to the gradient before the moments, so the decay is rescaled by
1/√v̂ like any gradient; AdamW shrinks the weights by ``lr·wd·θ`` outside the moments (the
configured optimizer). Without weight decay the two agree, so only a scenario with it can tell.
"""

from __future__ import annotations

from unittest.mock import patch

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.update"
SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    """Folds each group's weight decay into the gradient, then steps with decay 0."""

    name = "adam-coupled-weight-decay"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        optimizer = state.optimizer
        adamw_step = optimizer.step

        def coupled_step(closure=None):
            decays = [group["weight_decay"] for group in optimizer.param_groups]
            with torch.no_grad():
                for group in optimizer.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            p.grad.add_(p, alpha=group["weight_decay"])
                    group["weight_decay"] = 0.0
            try:
                return adamw_step(closure)
            finally:
                for group, decay in zip(optimizer.param_groups, decays, strict=True):
                    group["weight_decay"] = decay

        with patch.object(optimizer, "step", coupled_step):
            return super().train_step(state, batch, cfg)
