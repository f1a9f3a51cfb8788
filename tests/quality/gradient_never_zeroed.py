"""Broken backend: gradients are never zeroed between optimizer steps, so each step's gradient adds every earlier one.

A trainer that calls `backward()` step after step without `zero_grad()` clips and applies the
running sum. Step 0 is right; from step 1 on the gradient, its norm and the update are wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from unittest.mock import patch

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline import trainer as trainer_module
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.gradient"
SCENARIO = "warmup-weight-decay-no-clip"


class Backend(ReferenceBackend):
    """Adds the gradient left from the earlier steps just before clipping (where a stale `.grad` would sit)."""

    name = "gradient-never-zeroed"

    def __init__(self) -> None:
        super().__init__()
        self._left: dict[int, torch.Tensor] = {}  # parameter index -> the sum of every earlier step's gradient

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        clip = trainer_module._clip_grad_norm

        def clip_accumulated(params: Sequence[torch.Tensor], max_norm: float | None) -> float:
            with torch.no_grad():
                for i, p in enumerate(params):
                    if p.grad is not None:
                        if i in self._left:
                            p.grad.add_(self._left[i])
                        self._left[i] = p.grad.detach().clone()
            return clip(params, max_norm)

        with patch.object(trainer_module, "_clip_grad_norm", clip_accumulated):
            return super().train_step(state, batch, cfg)
