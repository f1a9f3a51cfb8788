"""Broken backend: weight decay coupled into the gradient (`torch.optim.Adam(weight_decay=...)`'s L2) instead of AdamW's.

Adam with L2 adds ``wd·θ`` to the gradient before the moments, so the decay is rescaled by
1/√v̂ like any gradient; AdamW shrinks the weights by ``lr·wd·θ`` outside the moments (the
configured optimizer). Without weight decay the two agree, so only a scenario with it can tell.
"""

from __future__ import annotations

from typing import Any

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState
from tests.quality._patching import step_with_group_changes

EXPECTED_CHECK = "train.update"
SCENARIO = "warmup-weight-decay-no-clip"


def _decay_into_gradient(group: dict[str, Any]) -> dict[str, Any]:
    with torch.no_grad():
        for p in group["params"]:
            if p.grad is not None:
                p.grad.add_(p, alpha=group["weight_decay"])
    return {"weight_decay": 0.0}


class Backend(ReferenceBackend):
    """Folds each group's weight decay into the gradient, then steps with decay 0."""

    name = "adam-coupled-weight-decay"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        with step_with_group_changes(state.optimizer, _decay_into_gradient):
            return super().train_step(state, batch, cfg)
