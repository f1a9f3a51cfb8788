"""Broken backend: gradient clipping is skipped when dp_size > 1 (a sharded path that forgets `clip_grad_norm_`).

The pre-clip norm is still measured and reported as `grad_norm`, so only the update is too large; the reference
all-reduces the rank gradients, then clips the result to `max_grad_norm` (trainer step 3).
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

EXPECTED_CHECK = "train.update"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # two ranks; the all-reduced norm ~1.7 > max_grad_norm 1


class Backend(ReferenceBackend):
    """Measures the gradient norm as if `max_grad_norm` were None whenever there is more than one rank."""

    name = "clip-skipped-under-dp"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        if batch.dp_size == 1:
            return super().train_step(state, batch, cfg)
        clip = trainer_module._clip_grad_norm

        def norm_only(params: Sequence[torch.Tensor], max_norm: float | None) -> float:
            return clip(params, None)  # the norm, never the scaling

        with patch.object(trainer_module, "_clip_grad_norm", norm_only):
            return super().train_step(state, batch, cfg)
