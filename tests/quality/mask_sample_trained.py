"""Broken backend: rows of `mask_sample` rollouts are trained with weight 1 (their artifact still says 0)."""

from __future__ import annotations

from dataclasses import replace

import torch

from compactsim.harness.core.batch import TraceBatch
from compactsim.harness.pipeline.backend import ReferenceBackend
from compactsim.harness.pipeline.train_config import TrainerConfig
from compactsim.harness.pipeline.trainer import StepResult, TrainState

EXPECTED_CHECK = "train.loss"
SCENARIO = "layout-dp2-microbatch2-mask-sample"  # rollout 1 of (1, 0, 1) is mask_sample'd


class Backend(ReferenceBackend):
    """Trains every real row at sample_mask 1, then reports the batch it was given."""

    name = "mask-sample-trained"

    def train_step(self, state: TrainState, batch: TraceBatch, cfg: TrainerConfig) -> StepResult:
        real = batch.parent_indices >= 0
        ones = torch.where(real, torch.ones_like(batch.row_sample_mask), torch.zeros_like(batch.row_sample_mask))
        result = super().train_step(state, replace(batch, row_sample_mask=ones), cfg)
        arrays = {**result.artifact.arrays, "row_sample_mask": batch.row_sample_mask.to(torch.float64).numpy().copy()}
        return replace(result, batch=batch, artifact=replace(result.artifact, arrays=arrays))
